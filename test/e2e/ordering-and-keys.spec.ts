import { Injectable } from '@nestjs/common';
import { TaskHandler, type Task } from '@app/pg-queue';
import { drainQueue } from '@app/pg-queue/testing';
import { claimSql, claimStatements } from '../../libs/pg-queue/src/sql/claim.sql';
import { bootQueueApp, deferred, nextEvents, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

@Injectable()
class Recorder {
  seen: unknown[] = [];
  gate: ReturnType<typeof deferred<void>> | null = null;
  started = deferred();

  @TaskHandler('order.q', { concurrency: 1, batchSize: 1, mode: 'lease' })
  async order(task: Task<{ n: string }>) {
    this.seen.push(task.payload.n);
  }

  @TaskHandler('key.q', { mode: 'lease', concurrency: 1 })
  async keyed(task: Task<{ v: number }>) {
    this.seen.push(task.payload.v);
    if (this.gate) {
      this.started.resolve();
      await this.gate.promise;
    }
  }
}

describe('ordering, delays and dedup keys', () => {
  let db: TestDatabase;
  let qa: QueueApp;
  let rec: Recorder;

  beforeAll(async () => {
    db = await createTestDatabase();
    qa = await bootQueueApp(db.prisma(), [Recorder], { autoStart: false, databaseUrl: db.url });
    rec = qa.app.get(Recorder);
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });
  beforeEach(async () => {
    rec.seen = [];
    rec.gate = null;
    await db.sql('TRUNCATE pgqueue.task, pgqueue.task_archive');
  });

  it('runs lower priority first, then earlier runAt, then enqueue order; priority can change while pending', async () => {
    const past = new Date(Date.now() - 60_000);
    const [, , c] = await qa.queue.enqueueMany([
      { queue: 'order.q', payload: { n: 'a' }, options: { priority: 5 } },
      { queue: 'order.q', payload: { n: 'b' }, options: { priority: 1 } },
      { queue: 'order.q', payload: { n: 'c' }, options: { priority: 9 } },
      { queue: 'order.q', payload: { n: 'd' }, options: { priority: 1, runAt: past } },
      { queue: 'order.q', payload: { n: 'e' }, options: { priority: 1 } },
    ]);
    expect(await qa.queue.setPriority(c, -1)).toBe(true);
    await drainQueue(qa.app, 'order.q');
    expect(rec.seen).toEqual(['c', 'd', 'b', 'e', 'a']);
    expect(await qa.queue.setPriority(c, 3)).toBe(false); // no longer pending
  });

  it('the claim walks the partial index, not the table, with many pending tasks', async () => {
    await db.sql(`INSERT INTO pgqueue.task (queue, payload, priority)
                  SELECT 'other.q', '{}', g % 10 FROM generate_series(1, 50000) g`);
    await db.sql('ANALYZE pgqueue.task');
    // The real claim statement (group check included), planned with parameters.
    await db.sql(`PREPARE claim_plan(text, int, text, int, int, text) AS ${claimSql(claimStatements('pgqueue'), 10)}`);
    const plan = (await db.sql(`EXPLAIN EXECUTE claim_plan('order.q', 10, 'w', 1000, 5, '0123456789abcdef')`)).map((r) => r['QUERY PLAN']).join('\n');
    await db.sql('DEALLOCATE claim_plan');
    expect(plan).toMatch(/Index Scan using task_claim_idx/);
    expect(plan).not.toMatch(/Seq Scan|Sort/);
  });

  it.each(['ignore', 'replace', 'rerun'] as const)('50 concurrent enqueues of one key (%s) make exactly one task, without errors', async (mode) => {
    const clients = Array.from({ length: 5 }, () => db.prisma(10));
    const results = await Promise.allSettled(
      Array.from({ length: 50 }, (_, i) =>
        // Past Prisma's 2 s / 5 s: each client opens its 10 connections at once and the 50 take the key's row
        // in turn, slow on a loaded machine.
        clients[i % 5].$transaction((tx) => qa.queue.enqueue('key.unhandled', { v: i }, { key: `k-${mode}`, onConflict: mode, tx }), { maxWait: 30_000, timeout: 30_000 }),
      ),
    );
    expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
    const ids = new Set(results.map((r) => (r as PromiseFulfilledResult<string>).value));
    expect(ids.size).toBe(1);
    expect(await db.sql('SELECT count(*)::int AS n FROM pgqueue.task WHERE dedup_key = $1', [`k-${mode}`])).toEqual([{ n: 1 }]);
  });

  it('replace updates the pending task; ignore keeps it', async () => {
    const id = await qa.queue.enqueue('key.q', { v: 1 }, { key: 'doc-1' });
    expect(await qa.queue.enqueue('key.q', { v: 2 }, { key: 'doc-1' })).toBe(id);
    expect((await qa.queue.get(id))?.payload).toEqual({ v: 1 });
    expect(await qa.queue.enqueue('key.q', { v: 3 }, { key: 'doc-1', onConflict: 'replace', priority: 4 })).toBe(id);
    expect(await qa.queue.get(id)).toMatchObject({ payload: { v: 3 }, priority: 4 });
    await drainQueue(qa.app, 'key.q');
    expect(rec.seen).toEqual([3]);
    // the key is free again once the task is done
    expect(await qa.queue.enqueue('key.q', { v: 4 }, { key: 'doc-1' })).not.toBe(id);
  });
});

describe('with running workers', () => {
  let db: TestDatabase;
  let qa: QueueApp;
  let rec: Recorder;

  beforeAll(async () => {
    db = await createTestDatabase();
    // A long poll: only NOTIFY and due-time timers can start tasks on time here.
    qa = await bootQueueApp(db.prisma(), [Recorder], { databaseUrl: db.url, pollIntervalMs: 30_000 });
    rec = qa.app.get(Recorder);
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });
  beforeEach(() => {
    rec.seen = [];
    rec.gate = null;
  });

  it('never claims a postponed task early, and runs it once due (timer, no poll)', async () => {
    const t0 = Date.now();
    const ran = nextEvents(qa.queue.events$, (e) => e.type === 'completed' && e.queue === 'order.q');
    await qa.queue.enqueue('order.q', { n: 'later' }, { delayMs: 700 });
    expect(await drainQueue(qa.app, 'order.q')).toBe(0);
    await ran;
    expect(Date.now() - t0).toBeGreaterThanOrEqual(690);
  });

  it('rerun during a running handler runs exactly once more, with the newest payload', async () => {
    rec.gate = deferred();
    rec.started = deferred();
    const id = await qa.queue.enqueue('key.q', { v: 1 }, { key: 'doc-2', onConflict: 'rerun' });
    await rec.started.promise; // v1 is running
    for (const v of [2, 3, 4]) expect(await qa.queue.enqueue('key.q', { v }, { key: 'doc-2', onConflict: 'rerun' })).toBe(id);
    const twice = nextEvents(qa.queue.events$, (e) => e.type === 'completed' && e.taskId === id, 2);
    rec.gate.resolve();
    await twice;
    expect(rec.seen).toEqual([1, 4]);
    expect(await qa.queue.get(id)).toMatchObject({ state: 'done', payload: { v: 4 } });
  });
});
