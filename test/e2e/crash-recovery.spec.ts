import { Injectable } from '@nestjs/common';
import { TaskHandler, type Task, type TaskContext } from '@app/pg-queue';
import { drainQueue } from '@app/pg-queue/testing';
import type { Prisma } from '../../src/generated/prisma/client';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

import { rescueWhenExpired, startCrashWorker } from '../support/crash-worker';

@Injectable()
class Survivors {
  @TaskHandler('crash.write')
  async write(task: Task<{ customer: string }>, ctx: TaskContext<Prisma.TransactionClient>) {
    await ctx.tx.order.create({ data: { customer: task.payload.customer, amountCents: 1 } });
  }
}

describe('crash recovery (kill -9)', () => {
  let db: TestDatabase;
  let qa: QueueApp;

  beforeAll(async () => {
    db = await createTestDatabase();
    qa = await bootQueueApp(db.prisma(), [Survivors], { autoStart: false });
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });

  it('a worker killed mid-handler leaves no write; the task reruns and writes exactly once', async () => {
    const id = await qa.queue.enqueue('crash.write', { customer: 'exactly-once' });
    const worker = startCrashWorker(db.url, 'write-then-hang');
    expect(await worker.line('WROTE')).toBe(`WROTE ${id} 1`);
    worker.child.kill('SIGKILL');
    await worker.exited;

    // The killed attempt's write rolled back with its connection; the attempt itself is counted.
    expect(await db.sql("SELECT count(*)::int AS n FROM orders WHERE customer = 'exactly-once'")).toEqual([{ n: 0 }]);
    const [claimed] = await db.sql('SELECT state, attempt, locked_by FROM pgqueue.task WHERE id = $1', [id]);
    expect(claimed).toMatchObject({ state: 'running', attempt: 1 });
    expect(claimed.locked_by).toMatch(/^crash-write-then-hang-\d+$/);

    expect(await rescueWhenExpired(qa.app)).toEqual({ rescued: 1, dead: 0 });
    expect(await drainQueue(qa.app, 'crash.write')).toBe(1);
    expect(await db.sql("SELECT count(*)::int AS n FROM orders WHERE customer = 'exactly-once'")).toEqual([{ n: 1 }]);
    expect(await qa.queue.get(id)).toMatchObject({ state: 'done', attempt: 2 });
  });

  it('a task that kills its worker every time ends dead after maxAttempts', async () => {
    const id = await qa.queue.enqueue('crash.poison', {}, { maxAttempts: 3 });
    const states: string[] = [];
    for (let attempt = 1; attempt <= 3; attempt++) {
      const worker = startCrashWorker(db.url, 'die');
      expect(await worker.line('DYING')).toBe(`DYING ${id} ${attempt}`);
      await worker.exited;
      const res = await rescueWhenExpired(qa.app);
      states.push(res.dead === 1 ? 'dead' : 'pending');
    }
    expect(states).toEqual(['pending', 'pending', 'dead']);
    const task = await qa.queue.get(id);
    expect(task).toMatchObject({ state: 'dead', attempt: 3 });
    expect(task?.lastError).toMatch(/lease expired: worker crash-die-\d+ did not finish attempt 3/);
  });
});
