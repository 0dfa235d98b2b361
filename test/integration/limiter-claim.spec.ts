/**
 * A named limiter in the limited claim (limiter.sql.ts): its concurrency counts the running tasks
 * of every queue registered as its own, and a claim it cut short looks again soon, while a claim
 * that simply found little work does not poll.
 */
import { Client } from 'pg';
import { LimitsRepository } from '../../libs/pg-queue/src/sql/limits.repository';
import { LIMITER_RECHECK_MS } from '../../libs/pg-queue/src/sql/limited-claim.function';
import { LimiterRepository } from '../../libs/pg-queue/src/sql/limiter.repository';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import { installSchema } from '../../libs/pg-queue/src/sql/schema.installer';
import { taskRow } from '../support/task-rows';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

describe('named limiters in the limited claim', () => {
  let db: TestDatabase;
  const repo = new TaskRepository('pgqueue', 'archive');
  const limits = new LimitsRepository('pgqueue', { limiters: new Map([['api', { name: 'api', concurrency: 3, rateLimit: null }]]) });
  const limiterRepo = new LimiterRepository('pgqueue', new Map([['api', { name: 'api', concurrency: 3, rateLimit: null }]]));
  const rules = { globalConcurrency: null, partitionConcurrency: null, rateLimit: null, limiter: 'api' };

  beforeAll(async () => {
    db = await createTestDatabase();
    await installSchema(db.prisma(), 'pgqueue');
    // lc.other is handled by another service: registered there, it counts here too.
    await limiterRepo.register(db.prisma(), [{ queue: 'lc.mine', limiter: 'api' }, { queue: 'lc.other', limiter: 'api' }]);
  });
  afterAll(() => db.drop());

  it("counts the other queues' running tasks; a claim the limiter cut short looks again soon, one that found little work does not", async () => {
    await repo.insert(db.prisma(), [taskRow('lc.other')]);
    expect((await repo.claim(db.prisma(), 'lc.other', 1, 'elsewhere', 60_000, 5)).rows).toHaveLength(1);
    await repo.insert(db.prisma(), Array.from({ length: 5 }, () => taskRow('lc.mine')));
    const cut = await limits.claim(db.prisma(), 'lc.mine', 10, 'w', 60_000, 5, rules);
    expect(cut.rows).toHaveLength(2); // 3 - the other queue's running one
    expect(cut.nextDueInMs).toBe(LIMITER_RECHECK_MS);
    const full = await limits.claim(db.prisma(), 'lc.mine', 10, 'w', 60_000, 5, rules);
    expect(full.rows).toEqual([]);
    expect(full.nextDueInMs).toBe(LIMITER_RECHECK_MS);

    // Room again, and only one task left to take: no recheck timer (an idle queue must not poll).
    await db.sql("UPDATE pgqueue.task SET state = 'pending', locked_by = NULL, lease_token = NULL, locked_until = NULL WHERE state = 'running'");
    await db.sql("DELETE FROM pgqueue.task WHERE queue = 'lc.mine' AND id NOT IN (SELECT min(id) FROM pgqueue.task WHERE queue = 'lc.mine')");
    await db.sql("DELETE FROM pgqueue.task WHERE queue = 'lc.other'");
    const little = await limits.claim(db.prisma(), 'lc.mine', 10, 'w', 60_000, 5, rules);
    expect(little.rows).toHaveLength(1);
    expect(little.nextDueInMs).toBeNull();
  });

  it('registration follows a queue that changed limiter or dropped it', async () => {
    await limiterRepo.register(db.prisma(), [{ queue: 'lc.other', limiter: null }, { queue: 'lc.moved', limiter: 'api' }]);
    await limiterRepo.register(db.prisma(), [{ queue: 'lc.moved', limiter: 'other' }]);
    expect(await db.sql('SELECT limiter, queue FROM pgqueue.limiter_queue ORDER BY queue')).toEqual([
      { limiter: 'api', queue: 'lc.mine' },
      { limiter: 'other', queue: 'lc.moved' },
    ]);
  });

  it('two instances registering the same queues in different orders do not deadlock (rows are taken in key order)', async () => {
    const queues = ['lc.b', 'lc.a'];
    await limiterRepo.register(db.prisma(), queues.map((queue) => ({ queue, limiter: 'api' })));
    // Instance one is part-way through its registration: it has updated lc.a's row (the first in
    // key order) and is about to update lc.b's, in an open transaction.
    const one = new Client({ connectionString: db.url });
    await one.connect();
    try {
      await one.query('BEGIN');
      await one.query("UPDATE pgqueue.limiter_queue SET seen_at = now() WHERE limiter = 'api' AND queue = 'lc.a'");
      // Instance two registers the same queues, listed the other way round.
      const two = limiterRepo.register(db.prisma(), queues.map((queue) => ({ queue, limiter: 'api' })));
      await new Promise((resolve) => setTimeout(resolve, 300)); // two is waiting for lc.a (or, before, holds lc.b)
      const next = await one.query("UPDATE pgqueue.limiter_queue SET seen_at = now() WHERE limiter = 'api' AND queue = 'lc.b'").then(
        () => 'updated',
        (err: Error) => err.message,
      );
      await one.query(next === 'updated' ? 'COMMIT' : 'ROLLBACK');
      expect({ one: next, two: await two.then(() => 'registered', (err: Error) => err.message) }).toEqual({ one: 'updated', two: 'registered' });
    } finally {
      await one.end();
    }
  });
});
