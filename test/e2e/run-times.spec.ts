import { Injectable } from '@nestjs/common';
import { TaskHandler, type Task, type TaskContext } from '@app/pg-queue';
import { drainQueue } from '@app/pg-queue/testing';
import type { Prisma } from '../../src/generated/prisma/client';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

const RUN_MS = 600;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Injectable()
class SlowHandlers {
  @TaskHandler('times.tx')
  async tx(_task: Task, ctx: TaskContext<Prisma.TransactionClient>) {
    await ctx.tx.$executeRawUnsafe('SELECT 1');
    await sleep(RUN_MS);
  }

  @TaskHandler('times.lease', { mode: 'lease' })
  async lease(_task: Task) {
    await sleep(RUN_MS);
  }
}

describe('hourly() reports the handlers\' real run times (issue 12 item 7)', () => {
  let db: TestDatabase;
  let qa: QueueApp;

  beforeAll(async () => {
    db = await createTestDatabase();
    qa = await bootQueueApp(db.prisma(), [SlowHandlers], { autoStart: false });
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });

  it.each(['times.tx', 'times.lease'])(`%s: a ${RUN_MS} ms handler is reported as running about that long`, async (queue) => {
    await qa.queue.enqueueMany([{ queue, payload: { n: 1 } }, { queue, payload: { n: 2 } }]);
    await drainQueue(qa.app, queue);
    const [hour] = await qa.queue.hourly({ queue });
    expect(hour).toMatchObject({ queue, done: 2 });
    // Timers may fire a little early or late; the old code reported the transaction's start (about 5 ms).
    expect(hour.avgMs).toBeGreaterThanOrEqual(RUN_MS - 20);
    expect(hour.avgMs).toBeLessThan(RUN_MS + 1000);
    const rows = await db.sql<{ started: Date; finished: Date }>('SELECT started_at AS started, finished_at AS finished FROM pgqueue.task_archive WHERE queue = $1', [queue]);
    for (const r of rows) expect(r.finished.getTime()).toBeGreaterThan(r.started.getTime());
  });
});
