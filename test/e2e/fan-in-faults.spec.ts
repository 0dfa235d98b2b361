/**
 * Fan-in in the conditions production brings (issue 22, item 12's settled run_at, and the
 * enqueue-with-dependants transaction's bounds and lock order): a join whose parents took a while
 * must queue behind what was enqueued meanwhile, two enqueues naming the same parents in opposite
 * orders must not deadlock (the parents' rows are locked in id order; before, the order was the
 * plan's, which on PostgreSQL 15 happened to sort them), and a business transaction holding a
 * parent's row must make an enqueue that owns its transaction fail within its bound, not wait
 * with it.
 */
import { Injectable } from '@nestjs/common';
import { Client } from 'pg';
import { PgQueueError, TaskHandler, type LeaseTaskContext, type Task } from '@app/pg-queue';
import { DEPENDANTS_BOUNDS } from '../../libs/pg-queue/src/sql/insert.repository';
import { bootQueueApp, deferred, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor, within } from '../support/wait-for';

/** Parents of 'fif.parent' run until the test opens their gate. */
const gate = deferred();
const parentStarted = deferred();

@Injectable()
class Handlers {
  @TaskHandler('fif.parent', { mode: 'lease' })
  async parent(_task: Task<unknown>, _ctx: LeaseTaskContext) {
    parentStarted.resolve();
    await gate.promise;
    return 'parent done';
  }
}

describe('fan-in in production conditions', () => {
  let db: TestDatabase;
  let qa: QueueApp;
  let prisma: ReturnType<TestDatabase['prisma']>;
  const queue = () => qa.queue;

  beforeAll(async () => {
    db = await createTestDatabase();
    // 'fif.join' and 'fif.idle' have no handler here: their tasks stay where settling leaves them.
    prisma = db.prisma(12);
    qa = await bootQueueApp(prisma, [Handlers], { databaseUrl: db.url, pollIntervalMs: 1000 });
  });
  afterAll(async () => {
    gate.resolve();
    await qa?.close();
    await db?.drop();
  });

  it('a join made pending by its last parent queues from then on: not ahead of tasks enqueued while it waited, not overdue; a later runAt of its own stays', async () => {
    const parent = await queue().enqueue('fif.parent', {});
    const join = await queue().enqueue('fif.join', { n: 'join' }, { dependsOn: [parent] });
    const delayed = await queue().enqueue('fif.join', { n: 'delayed' }, { dependsOn: [parent], delayMs: 3_600_000 });
    const delayedRunAt = (await queue().get(delayed))!.runAt;
    await parentStarted.promise;
    // Enqueued into the join's queue while the join waits for its parent.
    const meanwhile = await queue().enqueue('fif.join', { n: 'meanwhile' });
    gate.resolve();
    await waitFor('the join is pending', async () => (await queue().get(join))?.state === 'pending', { timeoutMs: 20_000, everyMs: 20 });

    const [j, m, p, d] = await Promise.all([join, meanwhile, parent, delayed].map(async (id) => (await queue().get(id))!));
    expect(p.state).toBe('done');
    // Claims go by (priority, run_at, id): a run_at before `meanwhile`'s would start the join first.
    expect(j.runAt.getTime()).toBeGreaterThanOrEqual(m.runAt.getTime());
    // Due since its parent finished, not since it was enqueued.
    expect(j.runAt.getTime()).toBeGreaterThanOrEqual(p.finishedAt!.getTime());
    expect(d).toMatchObject({ state: 'pending', runAt: delayedRunAt });

    // stats() reads the join's queue as due since the parent finished at most (`meanwhile` gone).
    await queue().cancel(meanwhile);
    const stats = (await queue().stats()).find((s) => s.queue === 'fif.join')!;
    const [sinceParent] = await db.sql<{ ms: number }>('SELECT (extract(epoch FROM now() - $1::timestamptz) * 1000)::float8 AS ms', [p.finishedAt]);
    expect(stats.oldestDueMs).not.toBeNull();
    expect(stats.oldestDueMs!).toBeLessThanOrEqual(sinceParent.ms);
  });

  it('enqueueMany calls naming the same parents in opposite orders, at once, never deadlock', async () => {
    const parents = await queue().enqueueMany(Array.from({ length: 40 }, (_, i) => ({ queue: 'fif.idle', payload: { i } })));
    const orders = [parents, [...parents].reverse()];
    // Each round: four calls at once, two naming the parents in ascending order, two in descending.
    for (let round = 0; round < 25; round++) {
      const outcomes = await Promise.allSettled(
        [0, 1, 2, 3].map((k) => queue().enqueueMany(
          Array.from({ length: 3 }, () => ({ queue: 'fif.join', payload: { round, k }, options: { dependsOn: orders[k % 2] } })),
        )),
      );
      const failed = outcomes.flatMap((o) => (o.status === 'rejected' ? [String((o.reason as Error).message).slice(0, 300)] : []));
      expect({ round, failed }).toEqual({ round, failed: [] });
    }
    const [row] = await db.sql<{ n: number }>("SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = 'fif.join' AND state = 'waiting' AND deps_left = 40");
    expect(row.n).toBe(25 * 4 * 3);
  });

  it('an enqueue that owns its transaction gives up waiting for a parent row a business transaction holds: a clear error within its bound, nothing written, no backend left waiting', async () => {
    const [parent] = await queue().enqueueMany([{ queue: 'fif.idle', payload: { held: true } }]);
    const business = new Client({ connectionString: db.url });
    await business.connect();
    try {
      await business.query('BEGIN');
      await business.query('SELECT 1 FROM pgqueue.task WHERE id = $1 FOR UPDATE', [parent]);
      const began = Date.now();
      const err = await within(queue().enqueue('fif.join', { held: true }, { dependsOn: [parent] }).catch((e: unknown) => e), 40_000, 'still waiting');
      const tookMs = Date.now() - began;
      expect(err).toBeInstanceOf(PgQueueError);
      expect((err as Error).message).toMatch(/^pg-queue: enqueue with dependsOn gave up waiting for a row lock after \d+ ms/);
      // Within the bound: the lock wait gave up, not the transaction's own timeout (a loose check).
      expect(tookMs).toBeLessThan(DEPENDANTS_BOUNDS.transactionMs);
      const [waiting] = await db.sql<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'");
      expect(waiting.n).toBe(0);
      const [written] = await db.sql<{ n: number }>("SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = 'fif.join' AND payload->>'held' = 'true'");
      expect(written.n).toBe(0);
    } finally {
      await business.query('ROLLBACK');
      await business.end();
    }
    // The transaction gone, the same enqueue goes through.
    const join = await queue().enqueue('fif.join', { held: true }, { dependsOn: [parent] });
    expect(await queue().get(join)).toMatchObject({ state: 'waiting', dependenciesLeft: 1 });
  });
  it("an enqueue with dependsOn inside the caller's transaction leaves that transaction's settings as they were", async () => {
    const [parent] = await queue().enqueueMany([{ queue: 'fif.idle', payload: {} }]);
    const settings = () => "SELECT current_setting('lock_timeout') AS lock, current_setting('idle_in_transaction_session_timeout') AS idle, current_setting('statement_timeout') AS stmt";
    type Settings = { lock: string; idle: string; stmt: string };
    const [before, after] = await prisma.$transaction(async (tx) => {
      const [b] = await tx.$queryRawUnsafe<Settings[]>(settings());
      await queue().enqueue('fif.join', {}, { tx, dependsOn: [parent] });
      const [a] = await tx.$queryRawUnsafe<Settings[]>(settings());
      return [b, a];
    });
    // Before the fix, Prisma 7's transaction client (which has $transaction: nested ones are
    // savepoints) was taken for a root client: the enqueue's own bounds (idle 5 s, ...) stayed set
    // for the rest of the business transaction, which the server then ended when it idled.
    expect(after).toEqual(before);
  });
});
