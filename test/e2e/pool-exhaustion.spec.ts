import { Injectable } from '@nestjs/common';
import { TaskHandler, type Task, type TaskContext } from '@app/pg-queue';
import type { Prisma } from '../../src/generated/prisma/client';
import { bootQueueApp, nextEvents, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

const TASKS_PER_QUEUE = 2;
// Each handler holds the one pool connection longer than a batch of the other queue may wait for
// its transaction to start (2 s), so batches do fail to start.
const HOLD_MS = 2200;
const OPTIONS = { concurrency: 2, batchSize: 1, leaseMs: 10_000, backoff: { type: 'fixed' as const, delayMs: 0 } };

/** Records how often each task's handler really ran. */
@Injectable()
class BusyHandlers {
  runs = new Map<string, number>();

  private async work(task: Task, ctx: TaskContext<Prisma.TransactionClient>) {
    this.runs.set(task.id, (this.runs.get(task.id) ?? 0) + 1);
    await ctx.tx.$executeRawUnsafe(`SELECT pg_sleep(${HOLD_MS / 1000})`);
  }

  @TaskHandler('busy.a', OPTIONS)
  async a(task: Task, ctx: TaskContext<Prisma.TransactionClient>) {
    await this.work(task, ctx);
  }

  @TaskHandler('busy.b', OPTIONS)
  async b(task: Task, ctx: TaskContext<Prisma.TransactionClient>) {
    await this.work(task, ctx);
  }
}

describe('a Prisma pool of one connection and two busy transactional queues', () => {
  let db: TestDatabase;
  let qa: QueueApp;

  beforeAll(async () => {
    db = await createTestDatabase();
    qa = await bootQueueApp(db.prisma(1), [BusyHandlers], { rescueIntervalMs: 500, databaseUrl: db.url });
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });

  it('slows the queues but counts no attempt without a run: every task done, attempts = runs', async () => {
    const total = 2 * TASKS_PER_QUEUE;
    const released = nextEvents(qa.queue.events$, (e) => e.type === 'released');
    const completed = nextEvents(qa.queue.events$, (e) => e.type === 'completed', total);
    await qa.queue.enqueueMany(
      ['busy.a', 'busy.b'].flatMap((queue) => Array.from({ length: TASKS_PER_QUEUE }, (_, n) => ({ queue, payload: { n } }))),
    );
    await completed;
    // The pool really ran out: some batch could not start its transaction and gave its task back.
    await released;
    const rows = await db.sql<{ id: string; state: string; attempt: number }>(
      "SELECT id::text, state, attempt FROM pgqueue.task_archive UNION ALL SELECT id::text, state, attempt FROM pgqueue.task ORDER BY 1",
    );
    expect(rows).toHaveLength(total);
    const runs = qa.app.get(BusyHandlers).runs;
    expect(rows.map((r) => ({ id: r.id, state: r.state, attempt: r.attempt }))).toEqual(
      rows.map((r) => ({ id: r.id, state: 'done', attempt: runs.get(r.id) })),
    );
  }, 120_000);
});
