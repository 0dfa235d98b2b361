import { Injectable } from '@nestjs/common';
import { TaskHandler, type Task, type TaskContext } from '@app/pg-queue';
import { drainQueue } from '@app/pg-queue/testing';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import type { Prisma, PrismaClient } from '../../src/generated/prisma/client';
import { rescueWhenExpired, startCrashWorker } from '../support/crash-worker';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

@Injectable()
class WorkerB {
  @TaskHandler('stall.tx')
  async tx(task: Task<{ customer: string }>, ctx: TaskContext<Prisma.TransactionClient>) {
    await ctx.tx.order.create({ data: { customer: task.payload.customer, amountCents: 2 } });
  }

  @TaskHandler('stall.lease', { mode: 'lease' })
  async lease(task: Task<{ customer: string }>) {
    await this.prisma.order.create({ data: { customer: task.payload.customer, amountCents: 2 } });
  }

  prisma!: PrismaClient;
}

describe('fencing: a worker that lost its lease changes nothing', () => {
  let db: TestDatabase;
  let qa: QueueApp;

  beforeAll(async () => {
    db = await createTestDatabase();
    const prisma = db.prisma();
    qa = await bootQueueApp(prisma, [WorkerB], { autoStart: false });
    qa.app.get(WorkerB).prisma = prisma;
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });

  const orders = (customer: string) => db.sql('SELECT amount_cents FROM orders WHERE customer = $1', [customer]);

  it('transactional: a paused worker A is overtaken by B; A resumes and its writes are rolled back', async () => {
    const id = await qa.queue.enqueue('stall.tx', { customer: 'fenced-tx' });
    const a = startCrashWorker(db.url, 'A');
    try {
      expect(await a.line('STARTED')).toBe(`STARTED ${id} 1`);
      a.child.kill('SIGSTOP');
      // The server ends A's idle transaction (handler timeout + grace), then the lease is rescued.
      await rescueWhenExpired(qa.app);
      expect(await drainQueue(qa.app, 'stall.tx')).toBe(1);
      a.child.kill('SIGCONT');
      expect(await a.line(`EVENT lease-lost ${id}`)).toBeTruthy();
      expect(await orders('fenced-tx')).toEqual([{ amount_cents: 2 }]); // B's write only
      expect(await qa.queue.get(id)).toMatchObject({ state: 'done', attempt: 2 });
    } finally {
      a.child.kill('SIGKILL');
      await a.exited;
    }
  });

  it('lease mode: a paused worker A is overtaken by B; A gets LeaseLostError and completes nothing', async () => {
    const id = await qa.queue.enqueue('stall.lease', { customer: 'fenced-lease' });
    const a = startCrashWorker(db.url, 'A');
    try {
      expect(await a.line('STARTED')).toBe(`STARTED ${id} 1`);
      a.child.kill('SIGSTOP');
      await rescueWhenExpired(qa.app);
      expect(await drainQueue(qa.app, 'stall.lease')).toBe(1);
      const doneByB = await qa.queue.get(id);
      a.child.kill('SIGCONT');
      expect(await a.line('HEARTBEAT')).toBe('HEARTBEAT LeaseLostError');
      expect(await a.line(`EVENT lease-lost ${id}`)).toBeTruthy();
      expect(await orders('fenced-lease')).toEqual([{ amount_cents: 2 }]);
      expect(await qa.queue.get(id)).toEqual(doneByB);
      expect(doneByB).toMatchObject({ state: 'done', attempt: 2 });
    } finally {
      a.child.kill('SIGKILL');
      await a.exited;
    }
  });

  it('every finishing statement is fenced by the lease token', async () => {
    const prisma = db.prisma();
    const repo = new TaskRepository('pgqueue', 'archive');
    const [id] = await qa.queue.enqueueMany([{ queue: 'fence.raw', payload: {} }]);
    const [stale] = (await repo.claim(prisma, 'fence.raw', 1, 'A', 1, 5)).rows;
    await db.sql("UPDATE pgqueue.task SET locked_until = now() - interval '1 second' WHERE id = $1", [id]);
    expect(await repo.rescueExpired(prisma)).toEqual({ rescued: 1, dead: 0 });
    const [fresh] = (await repo.claim(prisma, 'fence.raw', 1, 'B', 60_000, 5)).rows;
    expect(fresh.attempt).toBe(2);
    const staleLease = [{ id, token: stale.lease_token }];
    const before = await qa.queue.get(id);

    expect(await repo.heartbeat(prisma, staleLease, 60_000)).toEqual(new Map());
    expect(await repo.fail(prisma, [{ ...staleLease[0], error: 'x', delayMs: 0, fatal: true }])).toEqual(new Map());
    expect([...(await repo.release(prisma, staleLease))]).toEqual([]);
    await expect(
      prisma.$transaction(async (tx) => {
        expect((await repo.lockLeases(tx, staleLease, { idleMs: 1000, statementMs: 1000 })).held).toEqual(new Set());
        await tx.order.create({ data: { customer: 'stale-write', amountCents: 1 } });
        const done = await repo.complete(tx, staleLease.map((l) => ({ ...l, startedAt: 0, finishedAt: 0 })), []);
        if (!done.done.has(id)) throw new Error('lease lost'); // what the runner does
      }),
    ).rejects.toThrow('lease lost');
    expect(await orders('stale-write')).toEqual([]);
    expect(await qa.queue.get(id)).toEqual(before);
  });
});
