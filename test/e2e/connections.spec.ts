/**
 * Queues across databases: two PgQueueModule registrations in one app, the default one on one
 * database and 'billing' on another, each with its own Prisma client. Handlers run on the
 * registration their decorator names, TaskQueue tokens reach the right database, follow-ups stay
 * in their parent's database, and naming mistakes fail startup with a clear error.
 */
import { Inject, Injectable } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  HandlerConfigurationError,
  InjectTaskQueue,
  InvalidOptionsError,
  PgQueueError,
  PgQueueModule,
  TaskHandler,
  TaskQueue,
  getTaskQueueToken,
  type LeaseTaskContext,
  type Task,
  type TaskContext,
} from '@app/pg-queue';
import type { PrismaClient } from '../../src/generated/prisma/client';
import { drainQueue } from '@app/pg-queue/testing';
import { PgQueueMetricsModule, QueueMetrics } from '@app/pg-queue/metrics';
import { PgQueueHealthIndicator, PgQueueHealthModule } from '@app/pg-queue/health';
import { PgQueueDashboardModule } from '../../libs/pg-queue/src/dashboard/dashboard.module';
import { DashboardData } from '../../libs/pg-queue/src/dashboard/dashboard.data';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { ownerOf, track } from '../support/leftovers';
import { waitFor } from '../support/wait-for';

const ran: { queue: string; id: string; database: string }[] = [];

@Injectable()
class Handlers {
  @TaskHandler('orders.place')
  async place(task: Task, ctx: TaskContext) {
    const [row] = await ctx.tx.$queryRawUnsafe<{ db: string }[]>('SELECT current_database() AS db');
    ran.push({ queue: task.queue, id: task.id, database: row.db });
  }

  @TaskHandler('billing.charge', { connection: 'billing' })
  async charge(task: Task, ctx: TaskContext) {
    const [row] = await ctx.tx.$queryRawUnsafe<{ db: string }[]>('SELECT current_database() AS db');
    ran.push({ queue: task.queue, id: task.id, database: row.db });
    await ctx.enqueue('billing.receipt', { charge: task.id });
  }

  @TaskHandler('billing.receipt', { connection: 'billing', mode: 'lease' })
  async receipt(task: Task, _ctx: LeaseTaskContext) {
    ran.push({ queue: task.queue, id: task.id, database: '' });
  }
}

/** An app service that uses both registrations. */
@Injectable()
class Checkout {
  constructor(
    readonly orders: TaskQueue,
    @InjectTaskQueue('billing') readonly billing: TaskQueue,
  ) {}
}

/** The same, by token (for code that cannot use the decorator). */
@Injectable()
class ByToken {
  constructor(@Inject(getTaskQueueToken('billing')) readonly billing: TaskQueue) {}
}

async function boot(main: PrismaClient, billing: PrismaClient, urls: { main: string; billing: string }, providers: any[], extra: any[] = []) {
  const moduleRef = await Test.createTestingModule({
    imports: [
      PgQueueModule.forRoot({ prisma: main, databaseUrl: urls.main, pollIntervalMs: 200, shutdownTimeoutMs: 5000 }),
      PgQueueModule.forRootAsync({
        connection: 'billing',
        useFactory: () => ({ prisma: billing, databaseUrl: urls.billing, pollIntervalMs: 200, shutdownTimeoutMs: 5000 }),
      }),
      ...extra,
    ],
    providers,
  }).compile();
  const close = track(ownerOf.get(main) ?? '', () => moduleRef.close());
  const app = await moduleRef.init().catch(async (err: unknown) => {
    await close().catch(() => undefined);
    throw err;
  });
  return { app, close };
}

describe('queues across databases: several PgQueueModule registrations', () => {
  let main: TestDatabase;
  let billingDb: TestDatabase;

  beforeAll(async () => {
    [main, billingDb] = await Promise.all([createTestDatabase(), createTestDatabase()]);
  });
  afterAll(async () => {
    await main.drop();
    await billingDb.drop();
  });

  const tasksIn = async (db: TestDatabase, queue: string) =>
    db.sql<{ id: string; state: string }>(
      `SELECT id::text, state FROM pgqueue.task WHERE queue = $1 UNION ALL SELECT id::text, state FROM pgqueue.task_archive WHERE queue = $1 ORDER BY 1`,
      [queue],
    );

  it('each registration enqueues into and runs from its own database; follow-ups stay there', async () => {
    const { app, close } = await boot(main.prisma(4), billingDb.prisma(4), { main: main.url, billing: billingDb.url }, [Handlers, Checkout, ByToken]);
    try {
      const checkout = app.get(Checkout);
      expect(checkout.billing).not.toBe(checkout.orders);
      expect(app.get(ByToken).billing).toBe(checkout.billing);
      const order = await checkout.orders.enqueue('orders.place', {});
      const charges = await Promise.all([1, 2, 3].map((n) => checkout.billing.enqueue('billing.charge', { n })));
      // A billing task enqueued on the main database by mistake: no handler there runs it.
      const stray = await checkout.orders.enqueue('billing.charge', { stray: true });
      await waitFor('the receipts ran', () => ran.filter((r) => r.queue === 'billing.receipt').length === 3, { timeoutMs: 20_000, everyMs: 20 });
      await waitFor('the order ran', () => ran.some((r) => r.id === order && r.queue === 'orders.place'), { timeoutMs: 20_000, everyMs: 20 });

      expect(ran.find((r) => r.queue === 'orders.place')!.database).toBe(main.name);
      expect(ran.filter((r) => r.queue === 'billing.charge').map((r) => r.database)).toEqual([billingDb.name, billingDb.name, billingDb.name]);
      expect((await tasksIn(billingDb, 'billing.charge')).map((t) => t.id)).toEqual([...charges].sort((a, b) => Number(a) - Number(b)));
      expect(await tasksIn(billingDb, 'billing.receipt')).toHaveLength(3);
      expect(await tasksIn(main, 'billing.receipt')).toHaveLength(0);
      expect(await tasksIn(main, 'billing.charge')).toEqual([{ id: stray, state: 'pending' }]);
      expect(await tasksIn(billingDb, 'orders.place')).toHaveLength(0);
      expect(ran.filter((r) => r.database === main.name && r.queue === 'billing.charge')).toHaveLength(0);
      // The operator API of each registration reads its own database.
      expect(await checkout.billing.get(charges[0])).toMatchObject({ queue: 'billing.charge', state: 'done' });
      expect(await checkout.orders.get(stray)).toMatchObject({ queue: 'billing.charge', state: 'pending' });
    } finally {
      await close();
    }
  });

  it('the testing helpers act on the registration they name', async () => {
    const billingPrisma = billingDb.prisma(2);
    const moduleRef = await Test.createTestingModule({
      imports: [
        PgQueueModule.forRoot({ prisma: main.prisma(2), autoStart: false }),
        PgQueueModule.forRoot({ connection: 'billing', prisma: billingPrisma, autoStart: false }),
      ],
      providers: [Handlers, Checkout],
    }).compile();
    const close = track(ownerOf.get(billingPrisma) ?? '', () => moduleRef.close());
    try {
      const app = await moduleRef.init();
      const id = await app.get(Checkout).billing.enqueue('billing.charge', { inline: true });
      expect(await drainQueue(app)).toBe(0); // the default registration: nothing of its own due
      expect(await drainQueue(app, undefined, 'billing')).toBe(2); // the charge and its receipt
      expect(await app.get(Checkout).billing.get(id)).toMatchObject({ state: 'done' });
    } finally {
      await close();
    }
  });

  it('health, metrics and the dashboard report on the registration they name; a name nobody registered is a pg-queue error', async () => {
    const billingPrisma = billingDb.prisma(2);
    const moduleRef = await Test.createTestingModule({
      imports: [
        // Only a named registration: nothing of the default one to fall back on.
        PgQueueModule.forRoot({ connection: 'billing', prisma: billingPrisma, autoStart: false }),
        PgQueueMetricsModule.forRoot({ connection: 'billing' }),
        PgQueueHealthModule,
        PgQueueDashboardModule.forRoot({ guard: 'none', connection: 'billing' }),
      ],
      providers: [Checkout],
    })
      .overrideProvider(Checkout)
      .useFactory({ factory: (billing: TaskQueue) => ({ billing }), inject: [getTaskQueueToken('billing')] })
      .compile();
    const close = track(ownerOf.get(billingPrisma) ?? '', () => moduleRef.close());
    try {
      const app = await moduleRef.init();
      await app.get(Checkout).billing.enqueue('billing.audit', {});
      expect(await app.get(QueueMetrics).metrics()).toContain('pgqueue_tasks{queue="billing.audit",state="due"} 1');
      const health = app.get(PgQueueHealthIndicator);
      expect(await health.isHealthy('billing', { connection: 'billing' })).toMatchObject({ billing: { status: 'up' } });
      await expect(health.isHealthy('main')).rejects.toThrow(/PgQueueHealthIndicator needs PgQueueModule \(forRoot or forRootAsync, without a connection name\)/);
      expect((await app.get(DashboardData).overview()).queues.map((q) => q.queue)).toContain('billing.audit');
    } finally {
      await close();
    }
    // Metrics asked of the default registration in an app that has only a named one.
    const lone = await Test.createTestingModule({
      imports: [PgQueueModule.forRoot({ connection: 'billing', prisma: billingDb.prisma(1), autoStart: false }), PgQueueMetricsModule],
    }).compile();
    const err = await lone.init().then(
      () => null,
      (e: unknown) => e,
    );
    await lone.close();
    expect(err).toBeInstanceOf(PgQueueError);
    expect((err as Error).message).toMatch(/QueueMetrics needs PgQueueModule/);
  });

  it('a handler naming a connection nobody registered fails startup, as does a name used twice or a bad name', async () => {
    @Injectable()
    class Misplaced {
      @TaskHandler('x.work', { connection: 'biling' })
      async work() {}
    }
    const err = await boot(main.prisma(2), billingDb.prisma(2), { main: main.url, billing: billingDb.url }, [Misplaced]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(HandlerConfigurationError);
    expect((err as Error).message).toMatch(/@TaskHandler\("x\.work"\)\.connection.*no PgQueueModule registration is named "biling" \(registered: .*"billing"/);

    const twice = await boot(main.prisma(2), billingDb.prisma(2), { main: main.url, billing: billingDb.url }, [], [
      PgQueueModule.forRoot({ connection: 'billing', prisma: billingDb.prisma(2), autoStart: false }),
    ]).catch((e: unknown) => e);
    expect(twice).toBeInstanceOf(InvalidOptionsError);
    expect((twice as Error).message).toMatch(/two PgQueueModule registrations are named "billing"/);

    for (const connection of ['', '1x', 'a b', 'x'.repeat(64), 7]) {
      expect(() => PgQueueModule.forRoot({ connection: connection as string, prisma: main.prisma(1) })).toThrow(InvalidOptionsError);
    }
  });
});
