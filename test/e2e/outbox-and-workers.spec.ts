import { Injectable } from '@nestjs/common';
import { TaskHandler, WorkerOrchestrator, type Task, type TaskContext } from '@app/pg-queue';
import type { Prisma } from '../../src/generated/prisma/client';
import { bootQueueApp, deferred, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

@Injectable()
class Writer {
  @TaskHandler('many.write', { concurrency: 4, batchSize: 8 })
  async write(task: Task<{ n: number }>, ctx: TaskContext<Prisma.TransactionClient>) {
    await ctx.tx.order.create({ data: { customer: `task-${task.id}`, amountCents: task.payload.n } });
  }

  @TaskHandler('many.lease', { mode: 'lease', concurrency: 10, batchSize: 5 })
  async lease() {
    await new Promise((r) => setTimeout(r, 1));
  }
}

describe('outbox enqueue and many workers', () => {
  let db: TestDatabase;
  let api: QueueApp;

  beforeAll(async () => {
    db = await createTestDatabase();
    api = await bootQueueApp(db.prisma(), [], { autoStart: false });
  });
  afterAll(async () => {
    await api.close();
    await db.drop();
  });

  it('a business transaction that rolls back after enqueue leaves neither row', async () => {
    const prisma = db.prisma();
    await expect(
      prisma.$transaction(async (tx) => {
        await tx.order.create({ data: { customer: 'outbox-rollback', amountCents: 1 } });
        await api.queue.enqueue('many.write', { n: 1 }, { tx });
        throw new Error('business rule failed');
      }),
    ).rejects.toThrow('business rule failed');
    expect(await db.sql("SELECT count(*)::int AS n FROM orders WHERE customer = 'outbox-rollback'")).toEqual([{ n: 0 }]);
    expect(await db.sql('SELECT count(*)::int AS n FROM pgqueue.task')).toEqual([{ n: 0 }]);
  });

  it('a committed business transaction has both rows, and enqueue returns ids in input order', async () => {
    const prisma = db.prisma();
    const ids = await prisma.$transaction(async (tx) => {
      await tx.order.create({ data: { customer: 'outbox-commit', amountCents: 1 } });
      return api.queue.enqueueMany([1, 2, 3].map((n) => ({ queue: 'outbox.q', payload: { n } })), { tx });
    });
    const rows = await db.sql("SELECT id::text, payload->>'n' AS n FROM pgqueue.task WHERE queue = 'outbox.q'");
    expect(ids.map((id) => rows.find((r) => r.id === id)?.n)).toEqual(['1', '2', '3']);
    await db.sql("DELETE FROM pgqueue.task WHERE queue = 'outbox.q'");
  });

  it('three app instances on separate Prisma clients run every task exactly once', async () => {
    const total = 600;
    await api.queue.enqueueMany(Array.from({ length: total }, (_, n) => ({ queue: 'many.write', payload: { n } })));
    await api.queue.enqueueMany(Array.from({ length: total }, (_, n) => ({ queue: 'many.lease', payload: { n } })));
    const apps = await Promise.all([0, 1, 2].map((i) => bootQueueApp(db.prisma(6), [Writer], { autoStart: false, databaseUrl: db.url, workerId: `app-${i}` })));
    const completed = new Map<string, string[]>();
    const allDone = deferred();
    for (const [i, a] of apps.entries()) {
      a.queue.events$.subscribe((e) => {
        if (e.type !== 'completed') return;
        completed.set(e.taskId, [...(completed.get(e.taskId) ?? []), `app-${i}`]);
        if (completed.size === 2 * total) allDone.resolve();
      });
    }
    await Promise.all(apps.map((a) => a.app.get(WorkerOrchestrator).start()));
    await allDone.promise;
    try {
      expect(completed.size).toBe(2 * total);
      expect([...completed.values()].filter((by) => by.length > 1)).toEqual([]);
      const [dupes] = await db.sql("SELECT count(*)::int AS n FROM (SELECT customer FROM orders WHERE customer LIKE 'task-%' GROUP BY 1 HAVING count(*) > 1) d");
      expect(dupes.n).toBe(0);
      expect(await db.sql("SELECT count(*)::int AS n FROM orders WHERE customer LIKE 'task-%'")).toEqual([{ n: total }]);
      const workersUsed = new Set([...completed.values()].map(([w]) => w));
      expect(workersUsed.size).toBe(3);
    } finally {
      await Promise.all(apps.map((a) => a.close()));
    }
    expect(await db.sql("SELECT count(*)::int AS n FROM pgqueue.task WHERE queue LIKE 'many.%'")).toEqual([{ n: 0 }]);
  });
});
