import { Injectable, Module, type OnModuleDestroy } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { PrismaPg } from '@prisma/adapter-pg';
import { PgQueueModule, TaskHandler, TaskQueue, type Task, type LeaseTaskContext, type TaskContext } from '@app/pg-queue';
import { PrismaClient, type Prisma } from '../../src/generated/prisma/client';
import { track } from '../support/leftovers';
import { deferred } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

let db: TestDatabase;
const log: string[] = [];
const started = { tx: deferred(), lease: deferred() };

/** Disconnects in onModuleDestroy, as most apps' PrismaService does. */
@Injectable()
class AppPrisma extends PrismaClient implements OnModuleDestroy {
  constructor() {
    super({ adapter: new PrismaPg({ connectionString: db.url }) });
  }
  async onModuleDestroy() {
    log.push('prisma.onModuleDestroy');
    await this.$disconnect();
    log.push('prisma.disconnected');
  }
}

@Module({ providers: [AppPrisma], exports: [AppPrisma] })
class AppPrismaModule {}

type Job = { sleepMs: number; honourSignal: boolean };

@Injectable()
class SlowHandlers {
  @TaskHandler('shutdown.tx', { timeoutMs: 10_000 })
  async tx(task: Task<Job>, ctx: TaskContext<Prisma.TransactionClient>) {
    await ctx.tx.order.create({ data: { customer: `shutdown-${task.id}`, amountCents: 1 } });
    started.tx.resolve();
    await sleep(task.payload.sleepMs, task.payload.honourSignal ? ctx.signal : undefined);
    log.push('handler.done');
  }

  @TaskHandler('shutdown.buffered', { mode: 'lease', concurrency: 1, batchSize: 5, timeoutMs: 10_000 })
  async buffered(task: Task<{ block: boolean }>, ctx: LeaseTaskContext) {
    if (!task.payload.block) return;
    started.lease.resolve();
    await sleep(3000, ctx.signal);
  }

  @TaskHandler('shutdown.lease', { mode: 'lease', timeoutMs: 10_000 })
  async lease(task: Task<Job>, ctx: LeaseTaskContext) {
    started.lease.resolve();
    await sleep(task.payload.sleepMs, task.payload.honourSignal ? ctx.signal : undefined);
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(t);
      reject(signal.reason);
    });
  });
}

async function boot(shutdownTimeoutMs: number) {
  const moduleRef = await Test.createTestingModule({
    imports: [
      AppPrismaModule,
      PgQueueModule.forRootAsync({
        imports: [AppPrismaModule],
        inject: [AppPrisma],
        useFactory: (prisma: AppPrisma) => ({ prisma, databaseUrl: db.url, pollIntervalMs: 100, shutdownTimeoutMs }),
      }),
    ],
    providers: [SlowHandlers],
  }).compile();
  const close = track(db.url, () => moduleRef.close()); // by the test, or with the database if it fails
  const app = await moduleRef.init();
  const queue = app.get(TaskQueue);
  queue.events$.subscribe((e) => log.push(`event.${e.type}`));
  return { queue, close };
}

describe('graceful shutdown', () => {
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db.drop());
  beforeEach(() => {
    log.length = 0;
    started.tx = deferred();
    started.lease = deferred();
  });

  it('app.close() lets a running handler finish and commit before Prisma disconnects', async () => {
    const { queue, close } = await boot(10_000);
    const id = await queue.enqueue('shutdown.tx', { sleepMs: 400, honourSignal: true });
    await started.tx.promise;
    await close();
    expect(log.filter((l) => !l.startsWith('event.claimed'))).toEqual([
      'prisma.onModuleDestroy',
      'handler.done',
      'event.completed',
      'prisma.disconnected',
    ]);
    expect(await db.sql('SELECT count(*)::int AS n FROM orders WHERE customer = $1', [`shutdown-${id}`])).toEqual([{ n: 1 }]);
    expect(await db.sql('SELECT count(*)::int AS n FROM pgqueue.task WHERE state = $1', ['running'])).toEqual([{ n: 0 }]);
  });

  it.each([
    ['shutdown.tx', true],
    ['shutdown.tx', false],
    ['shutdown.lease', true],
    ['shutdown.lease', false],
  ])('past the deadline, %s (signal honoured: %s) is rolled back and released without counting the attempt', async (queueName, honourSignal) => {
    const { queue, close } = await boot(300);
    const id = await queue.enqueue(queueName, { sleepMs: 3000, honourSignal });
    await (queueName === 'shutdown.tx' ? started.tx.promise : started.lease.promise);
    const t0 = Date.now();
    await close();
    expect(Date.now() - t0).toBeLessThan(2900); // did not wait for the handler
    expect(log).toContain('event.released');
    expect(log.indexOf('event.released')).toBeLessThan(log.indexOf('prisma.disconnected'));
    const [task] = await db.sql('SELECT state, attempt, locked_by FROM pgqueue.task WHERE id = $1', [id]);
    expect(task).toEqual({ state: 'pending', attempt: 0, locked_by: null });
    expect(await db.sql('SELECT count(*)::int AS n FROM orders WHERE customer = $1', [`shutdown-${id}`])).toEqual([{ n: 0 }]);
    await db.sql('DELETE FROM pgqueue.task WHERE id = $1', [id]);
  });

  it('lease mode: tasks claimed ahead of a free slot are released uncounted too', async () => {
    const { queue, close } = await boot(300);
    // Quick tasks first, so the worker has seen a high rate and claims ahead of its one slot; then
    // five that block: one runs, the others wait claimed in the local buffer.
    await queue.enqueueMany(Array.from({ length: 300 }, () => ({ queue: 'shutdown.buffered', payload: { block: false } })));
    const ids = await queue.enqueueMany(Array.from({ length: 5 }, () => ({ queue: 'shutdown.buffered', payload: { block: true }, options: { priority: 1 } })));
    await started.lease.promise;
    // (the last quick tasks' completions may still be on their way)
    const running = async () => (await db.sql("SELECT id::text FROM pgqueue.task WHERE queue = 'shutdown.buffered' AND state = 'running' ORDER BY id")).map((r) => r.id);
    for (const deadline = Date.now() + 5000; JSON.stringify(await running()) !== JSON.stringify(ids) && Date.now() < deadline; ) {
      await new Promise((r) => setImmediate(r));
    }
    expect(await running()).toEqual(ids);
    await close();
    const rows = await db.sql('SELECT state, attempt FROM pgqueue.task WHERE id = ANY($1::bigint[])', [ids]);
    expect(rows).toEqual(Array(5).fill({ state: 'pending', attempt: 0 }));
    expect(log.filter((l) => l === 'event.released')).toHaveLength(5);
  });
});
