import { Injectable } from '@nestjs/common';
import { TaskHandler, type Task, type TaskContext } from '@app/pg-queue';
import { drainQueue } from '@app/pg-queue/testing';
import type { Prisma } from '../../src/generated/prisma/client';
import { bootQueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

@Injectable()
class Orders {
  @TaskHandler('helpers.confirm')
  async confirm(task: Task<{ customer: string }>, ctx: TaskContext<Prisma.TransactionClient>) {
    await ctx.tx.order.create({ data: { customer: task.payload.customer, amountCents: 1 } });
    await ctx.enqueue('helpers.notify', task.payload);
  }

  @TaskHandler('helpers.notify', { mode: 'lease' })
  async notify() {}
}

describe('drainQueue', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db.drop());

  // With autoStart, the app's own worker races drainQueue for every task: its claim may be
  // committed but not yet handed to a runner when drainQueue looks. drainQueue must wait for it.
  it('with workers running (autoStart), returns only once the task and its follow-ups are finished', async () => {
    const qa = await bootQueueApp(db.prisma(), [Orders], { databaseUrl: db.url });
    try {
      for (let i = 0; i < 40; i++) {
        const customer = `drain-${i}`;
        await qa.queue.enqueue('helpers.confirm', { customer });
        await drainQueue(qa.app);
        expect(await db.sql('SELECT count(*)::int AS n FROM orders WHERE customer = $1', [customer])).toEqual([{ n: 1 }]);
        expect(await db.sql("SELECT count(*)::int AS n FROM pgqueue.task WHERE queue LIKE 'helpers.%'")).toEqual([{ n: 0 }]);
      }
    } finally {
      await qa.close();
    }
  });

  it('without workers, runs the tasks inline and counts the attempts', async () => {
    const qa = await bootQueueApp(db.prisma(), [Orders], { autoStart: false });
    try {
      await qa.queue.enqueueMany(Array.from({ length: 5 }, (_, i) => ({ queue: 'helpers.confirm', payload: { customer: `inline-${i}` } })));
      expect(await drainQueue(qa.app)).toBe(10); // five confirmations, five notifications
      expect(await db.sql("SELECT count(*)::int AS n FROM orders WHERE customer LIKE 'inline-%'")).toEqual([{ n: 5 }]);
    } finally {
      await qa.close();
    }
  });
});
