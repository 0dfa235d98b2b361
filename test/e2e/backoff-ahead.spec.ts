/**
 * A back-off of the whole queue stops the work this instance already holds, not only its claims:
 * a fast lease queue claims ahead (up to two batches wait for a slot) and a transactional batch
 * runs its tasks one after another, so before, a downstream that answered 429 went on being
 * called by every task claimed before the answer.
 */
import { Injectable } from '@nestjs/common';
import { RateLimitedError, TaskHandler, type LeaseTaskContext, type Task, type TaskContext } from '@app/pg-queue';
import type { Prisma } from '../../src/generated/prisma/client';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { queueStates } from '../support/task-ledger';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A downstream that answers 429 while it is down, and counts its calls. */
const downstream = {
  downUntil: 0,
  served: 0,
  rejected: 0,
  call(): number | null {
    const wait = this.downUntil - Date.now();
    if (wait > 0) {
      this.rejected++;
      return wait;
    }
    this.served++;
    return null;
  },
};

@Injectable()
class AheadHandlers {
  @TaskHandler('ba.lease', { mode: 'lease', concurrency: 2, batchSize: 100 })
  async lease(_task: Task, _ctx: LeaseTaskContext) {
    const wait = downstream.call();
    if (wait !== null) throw new RateLimitedError({ retryAfterMs: wait, scope: 'queue' });
    await sleep(1);
  }

  @TaskHandler('ba.tx', { concurrency: 1, batchSize: 20 })
  async tx(_task: Task, _ctx: TaskContext<Prisma.TransactionClient>) {
    const wait = downstream.call();
    if (wait !== null) throw new RateLimitedError({ retryAfterMs: wait, scope: 'queue' });
  }
}

describe('a back-off of the whole queue and the tasks this instance already holds', () => {
  let db: TestDatabase;
  let qa: QueueApp;

  beforeAll(async () => {
    db = await createTestDatabase();
    qa = await bootQueueApp(db.prisma(6), [AheadHandlers], { databaseUrl: db.url, workerId: 'ahead', pollIntervalMs: 1000 });
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });

  const attempts = (queue: string) =>
    db.sql<{ attempt: number; n: number }>('SELECT attempt, count(*)::int AS n FROM pgqueue.task_archive WHERE queue = $1 GROUP BY 1 ORDER BY 1', [queue]);

  it('lease mode: the claimed-ahead tasks are given back uncounted, not started against the 429', async () => {
    Object.assign(downstream, { downUntil: 0, served: 0, rejected: 0 });
    await qa.queue.enqueueMany(Array.from({ length: 3000 }, (_, i) => ({ queue: 'ba.lease', payload: { i } })));
    // A pace of about two tasks a millisecond: the worker claims about 200 ahead.
    await waitFor('500 tasks served', () => downstream.served >= 500, { timeoutMs: 30_000, everyMs: 5 });
    downstream.downUntil = Date.now() + 1500;
    await waitFor('3 000 tasks done', async () => (await queueStates(db.sql, 'ba.lease')).done === 3000, { timeoutMs: 60_000, everyMs: 50 });
    // The tasks running when the 429 came (the 2 slots) met it; before, every task claimed ahead
    // started and met it too (100 to 200 of them).
    expect(downstream.rejected).toBeGreaterThan(0);
    expect(downstream.rejected).toBeLessThanOrEqual(2);
    expect(await attempts('ba.lease')).toEqual([{ attempt: 1, n: 3000 }]);
  });

  it('transactional mode: the rest of the batch is given back uncounted, not run against the 429', async () => {
    Object.assign(downstream, { downUntil: 0, served: 0, rejected: 0 });
    // Measured fast, the worker runs the next 20 tasks in one transaction.
    await qa.queue.enqueueMany(Array.from({ length: 20 }, (_, i) => ({ queue: 'ba.tx', payload: { i } })));
    await waitFor('20 tasks done', async () => (await queueStates(db.sql, 'ba.tx')).done === 20, { timeoutMs: 30_000, everyMs: 20 });
    downstream.downUntil = Date.now() + 1000;
    await qa.queue.enqueueMany(Array.from({ length: 20 }, (_, i) => ({ queue: 'ba.tx', payload: { i } })));
    await waitFor('40 tasks done', async () => (await queueStates(db.sql, 'ba.tx')).done === 40, { timeoutMs: 30_000, everyMs: 50 });
    // The batch's first task met it; before, every task of its batch did.
    expect(downstream.rejected).toBe(1);
    expect(await attempts('ba.tx')).toEqual([{ attempt: 1, n: 40 }]);
  });
});
