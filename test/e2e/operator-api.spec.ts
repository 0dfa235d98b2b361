import { Injectable } from '@nestjs/common';
import { InvalidArgumentError, NonRetryableError, TaskHandler, type Task, type LeaseTaskContext, type TaskContext } from '@app/pg-queue';
import { drainQueue } from '@app/pg-queue/testing';
import type { Prisma } from '../../src/generated/prisma/client';
import { bootQueueApp, deferred, nextEvents, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

@Injectable()
class Pipeline {
  @TaskHandler('stage.one')
  async one(task: Task<{ n: number }>, ctx: TaskContext) {
    await ctx.enqueue('stage.two', { n: task.payload.n + 1 });
  }

  @TaskHandler('stage.two', { mode: 'lease' })
  async two(task: Task<{ n: number }>, { enqueue }: LeaseTaskContext) {
    // Destructured: ctx's members must not depend on being called on ctx.
    await enqueue('stage.three', { n: task.payload.n + 1 });
  }

  @TaskHandler('stage.three')
  async three() {}

  started = deferred();
  aborted = deferred<string>();

  @TaskHandler('slow.tx', { timeoutMs: 20_000 })
  async slowTx(task: Task, ctx: TaskContext<Prisma.TransactionClient>) {
    await ctx.tx.order.create({ data: { customer: `cancel-${task.id}`, amountCents: 1 } });
    this.started.resolve();
    await new Promise((_, reject) => ctx.signal.addEventListener('abort', () => {
      this.aborted.resolve((ctx.signal.reason as Error).name);
      reject(ctx.signal.reason);
    }));
  }

  @TaskHandler('slow.lease', { mode: 'lease', timeoutMs: 20_000 })
  async slowLease(_task: Task, ctx: LeaseTaskContext) {
    this.started.resolve();
    await new Promise((resolve) => ctx.signal.addEventListener('abort', () => {
      this.aborted.resolve((ctx.signal.reason as Error).name);
      resolve(undefined); // ignores the abort and "completes": the task still ends cancelled
    }));
  }

  @TaskHandler('fails.q', { maxAttempts: 1 })
  async fails(task: Task<{ why: string }>) {
    throw new NonRetryableError(task.payload.why);
  }
}

describe('operator API', () => {
  let db: TestDatabase;
  let qa: QueueApp;
  let p: Pipeline;

  beforeAll(async () => {
    db = await createTestDatabase();
    qa = await bootQueueApp(db.prisma(), [Pipeline], { autoStart: false, databaseUrl: db.url });
    p = qa.app.get(Pipeline);
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });

  it('chain() returns every stage of a pipeline with states and timings', async () => {
    const root = await qa.queue.enqueue('stage.one', { n: 1 });
    await drainQueue(qa.app);
    const [third] = await db.sql("SELECT id::text FROM pgqueue.task_archive WHERE queue = 'stage.three'");
    for (const from of [root, third.id]) {
      const chain = await qa.queue.chain(from);
      expect(chain.map((s) => [s.stage, s.queue, s.state])).toEqual([
        [0, 'stage.one', 'done'],
        [1, 'stage.two', 'done'],
        [2, 'stage.three', 'done'],
      ]);
      expect(chain[1].parentId).toBe(root);
      for (const s of chain) expect(s.finishedAt!.getTime()).toBeGreaterThanOrEqual(s.startedAt!.getTime());
    }
  });

  it('cancels a pending task at once', async () => {
    const id = await qa.queue.enqueue('stage.three', {});
    expect(await qa.queue.cancel(id)).toBe('cancelled');
    expect((await qa.queue.get(id))?.state).toBe('cancelled');
    expect(await drainQueue(qa.app, 'stage.three')).toBe(0);
    expect(await qa.queue.cancel(id)).toBe('not-cancellable');
  });

  it.each(['slow.tx', 'slow.lease'])('cancels a running %s task: its signal fires, it ends cancelled, transactional writes roll back', async (queue) => {
    p.started = deferred();
    p.aborted = deferred<string>();
    const id = await qa.queue.enqueue(queue, {});
    const finished = nextEvents(qa.queue.events$, (e) => e.taskId === id && e.type !== 'claimed');
    const draining = drainQueue(qa.app, queue);
    await p.started.promise;
    expect(await qa.queue.cancel(id)).toBe('requested');
    expect(await p.aborted.promise).toBe('TaskCancelledError');
    expect((await finished)[0].type).toBe('cancelled');
    await draining;
    expect((await qa.queue.get(id))?.state).toBe('cancelled');
    expect(await db.sql('SELECT count(*)::int AS n FROM orders WHERE customer = $1', [`cancel-${id}`])).toEqual([{ n: 0 }]);
    expect(await db.sql('SELECT count(*)::int AS n FROM pgqueue.task_cancel')).toEqual([{ n: 0 }]);
  });

  it('retryDead retries dead tasks only; a cancelled task comes back only by its own retry(id)', async () => {
    // The running tasks cancelled above stay in the task table as cancelled.
    const [cancelled] = await db.sql<{ id: string }>("SELECT id::text FROM pgqueue.task WHERE queue = 'slow.lease' AND state = 'cancelled'");
    expect(await qa.queue.retryDead({ queue: 'slow.lease' })).toEqual([]);
    expect((await qa.queue.get(cancelled.id))?.state).toBe('cancelled');
    expect(await qa.queue.retry(cancelled.id)).toBe(true);
    expect(await qa.queue.get(cancelled.id)).toMatchObject({ state: 'pending', attempt: 0 });
    expect(await qa.queue.cancel(cancelled.id)).toBe('cancelled');
  });

  it('topErrors groups failures; retry and retryDead bring dead tasks back with attempts reset', async () => {
    const ids = await qa.queue.enqueueMany([
      { queue: 'fails.q', payload: { why: 'smtp down' } },
      { queue: 'fails.q', payload: { why: 'smtp down' } },
      { queue: 'fails.q', payload: { why: 'bad address' } },
    ]);
    await drainQueue(qa.app, 'fails.q');
    const top = await qa.queue.topErrors('fails.q');
    expect(top.map((t) => [t.error.split('\n')[0], t.count])).toEqual([
      ['NonRetryableError: pg-queue: smtp down'.replace('pg-queue: ', ''), 2],
      ['NonRetryableError: bad address', 1],
    ]);
    expect(await qa.queue.retry(ids[2])).toBe(true);
    expect(await qa.queue.get(ids[2])).toMatchObject({ state: 'pending', attempt: 0 });
    expect((await qa.queue.retryDead({ queue: 'fails.q', errorLike: '%smtp%' })).sort()).toEqual([ids[0], ids[1]].sort());
    expect((await qa.queue.stats()).find((s) => s.queue === 'fails.q')).toMatchObject({ pending: 3, dead: 0 });
    expect(await qa.queue.retry(ids[0])).toBe(false); // pending, not dead
  });

  it('list() pages through tasks newest first', async () => {
    const page1 = await qa.queue.list({ limit: 2 });
    const page2 = await qa.queue.list({ limit: 2, cursor: page1[1].id });
    expect(page1).toHaveLength(2);
    expect(BigInt(page2[0].id)).toBeLessThan(BigInt(page1[1].id));
    const dead = await qa.queue.list({ queue: 'stage.three', state: 'cancelled' });
    expect(dead.every((t) => t.queue === 'stage.three' && t.state === 'cancelled')).toBe(true);
  });

  it('a misspelled filter key is an error, never a wider filter: purge({ queu }) rejects and deletes nothing', async () => {
    const any = (v: unknown) => v as any; // untyped callers (JavaScript, the CLI's parsed options) get past the types
    const finished = await qa.queue.enqueue('stage.three', {});
    expect(await qa.queue.cancel(finished)).toBe('cancelled');
    await qa.queue.enqueue('stage.one', { n: 0 });
    await drainQueue(qa.app);
    const rows = async () => (await db.sql<{ n: number }>('SELECT (SELECT count(*) FROM pgqueue.task) + (SELECT count(*) FROM pgqueue.task_archive) AS n'))[0].n;
    const before = await rows();
    expect(Number(before)).toBeGreaterThan(0);

    const purge = qa.queue.purge(any({ queu: 'no.such.queue', states: ['done', 'cancelled', 'dead'], olderThanMs: 0 }));
    await expect(purge).rejects.toThrow(InvalidArgumentError);
    await expect(purge).rejects.toMatchObject({ argument: 'filter.queu', message: expect.stringContaining('did you mean "queue"?') });
    expect(await rows()).toBe(before);

    for (const call of [
      () => qa.queue.list(any({ queue: 'stage.three', stat: 'cancelled' })),
      () => qa.queue.retryDead(any({ queue: 'fails.q', errorlike: '%' })),
      () => qa.queue.hourly(any({ queues: 'stage.one' })),
    ]) {
      await expect(call()).rejects.toThrow(InvalidArgumentError);
    }
    expect(await rows()).toBe(before);
  });
});

@Injectable()
class SelfCancelling {
  queue!: QueueApp['queue'];

  @TaskHandler('self.cancel')
  async run(task: Task, ctx: TaskContext<Prisma.TransactionClient>) {
    await ctx.tx.order.create({ data: { customer: `self-${task.id}`, amountCents: 1 } });
    expect(await this.queue.cancel(task.id)).toBe('requested'); // an operator, mid-run
  }
}

describe('cancel without LISTEN (no databaseUrl)', () => {
  it('a transactional task cancelled mid-run ends cancelled with its writes rolled back', async () => {
    const db = await createTestDatabase();
    const qa = await bootQueueApp(db.prisma(), [SelfCancelling], { autoStart: false });
    try {
      qa.app.get(SelfCancelling).queue = qa.queue;
      const id = await qa.queue.enqueue('self.cancel', {});
      await drainQueue(qa.app, 'self.cancel');
      expect((await qa.queue.get(id))?.state).toBe('cancelled');
      expect(await db.sql('SELECT count(*)::int AS n FROM orders WHERE customer = $1', [`self-${id}`])).toEqual([{ n: 0 }]);
      expect(await db.sql('SELECT count(*)::int AS n FROM pgqueue.task_cancel')).toEqual([{ n: 0 }]);
    } finally {
      await qa.close();
      await db.drop();
    }
  });
});
