/**
 * The core guarantees through a real PgBouncer in transaction pooling (Debian's `pgbouncer`,
 * started on 127.0.0.1; `.ci/run` installs it): every app's Prisma pool goes through PgBouncer with
 * 4 server connections for all of them, LISTEN goes to the server directly (`databaseUrl`) or is
 * off (poll-only). No session state may be relied on between transactions: the queue uses none
 * (transaction-scoped settings and advisory locks only). Named prepared statements
 * (`queueStatementName`) need PgBouncer ≥ 1.21 with `max_prepared_statements`; Debian's 1.18 has
 * no such support, so these apps leave the adapter's default (unnamed statements).
 */
import { Injectable } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import { TaskHandler, WorkerOrchestrator, type LeaseTaskContext, type PgQueueModuleOptions, type Task, type TaskContext } from '@app/pg-queue';
import { drainQueue, rescueExpiredLeases } from '@app/pg-queue/testing';
import { PrismaClient, type Prisma } from '../../src/generated/prisma/client';
import { LEDGER_LEASE, LEDGER_TX, startLedgerWorker, type LedgerWorker } from '../support/ledger-handlers';
import { startPgBouncer, type PgBouncer } from '../support/pgbouncer';
import { bootQueueApp, deferred, nextEvents, type QueueApp } from '../support/queue-app';
import { auditAtLeastOnce, auditExactlyOnce, createLedgerTables, queueStates, settled } from '../support/task-ledger';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

@Injectable()
class BouncedHandlers {
  readonly leaseStarted = deferred();
  readonly leaseRelease = deferred();
  heartbeatError: unknown = null;

  @TaskHandler('pgb.confirm')
  async confirm(task: Task<{ orderId: number }>, ctx: TaskContext<Prisma.TransactionClient>) {
    await ctx.tx.order.update({ where: { id: task.payload.orderId }, data: { status: 'confirmed' } });
    await ctx.enqueue('pgb.ship', { orderId: task.payload.orderId });
  }

  /** Fails its first attempt: the retry must run (backoff, due time) through PgBouncer too. */
  @TaskHandler('pgb.ship', { maxAttempts: 3, backoff: { type: 'fixed', delayMs: 100, jitter: false } })
  async ship(task: Task<{ orderId: number }>, ctx: TaskContext<Prisma.TransactionClient>) {
    if (task.attempt === 1) throw new Error('carrier busy');
    await ctx.tx.order.update({ where: { id: task.payload.orderId }, data: { status: 'shipped' } });
  }

  @TaskHandler('pgb.slow', { mode: 'lease', leaseMs: 5_000 })
  async slow(_task: Task, ctx: LeaseTaskContext) {
    this.leaseStarted.resolve();
    await this.leaseRelease.promise;
    try {
      await ctx.heartbeat();
    } catch (err) {
      this.heartbeatError = err;
    }
  }

  @TaskHandler('pgb.tick', { mode: 'lease', schedule: { everyMs: 1000, name: 'pgb.tick' } })
  async tick() {}
}

describe('through PgBouncer in transaction pooling', () => {
  let db: TestDatabase;
  let bouncer: PgBouncer;
  const clients: PrismaClient[] = [];
  const apps: { close(): Promise<void> }[] = [];

  /** A Prisma client whose every statement goes through PgBouncer. */
  const bounced = (max = 4) => {
    const client = new PrismaClient({ adapter: new PrismaPg({ connectionString: bouncer.url(db.url), max }) });
    clients.push(client);
    return client;
  };
  const boot = async (options: Partial<PgQueueModuleOptions> = {}): Promise<QueueApp> => {
    const qa = await bootQueueApp(bounced(), [BouncedHandlers], { databaseUrl: db.url, ...options });
    apps.push(qa);
    return qa;
  };

  beforeAll(async () => {
    db = await createTestDatabase();
    bouncer = await startPgBouncer(db.url, { poolSize: 4 });
    await createLedgerTables(db.sql);
  });
  afterAll(async () => {
    for (const app of apps.reverse()) await app.close().catch(() => undefined);
    for (const c of clients) await c.$disconnect().catch(() => undefined);
    await bouncer?.stop();
    await db.drop();
  });

  it('outbox: a task commits with its business write or not at all; the handler chain and a retry run', async () => {
    const qa = await boot({ autoStart: false });
    const prisma = bounced();
    const order = await prisma.$transaction(async (tx) => {
      const o = await tx.order.create({ data: { customer: 'ada', amountCents: 100, updatedAt: new Date() } });
      await qa.queue.enqueue('pgb.confirm', { orderId: o.id }, { tx });
      return o;
    });
    await expect(
      prisma.$transaction(async (tx) => {
        const o = await tx.order.create({ data: { customer: 'ghost', amountCents: 1, updatedAt: new Date() } });
        await qa.queue.enqueue('pgb.confirm', { orderId: o.id }, { tx });
        throw new Error('the request fails after enqueueing');
      }),
    ).rejects.toThrow('the request fails');
    await drainQueue(qa.app, 'pgb.confirm');
    await waitFor('the retry of pgb.ship to be due', async () => (await drainQueue(qa.app, 'pgb.ship')) > 0 && (await queueStates(db.sql, 'pgb.ship')).done === 1);
    expect({
      order: (await db.sql('SELECT status FROM orders WHERE id = $1', [order.id]))[0].status,
      ghosts: (await db.sql("SELECT count(*)::int AS n FROM orders WHERE customer = 'ghost'"))[0].n,
      confirm: await queueStates(db.sql, 'pgb.confirm'),
      ship: (await db.sql("SELECT attempt, state FROM pgqueue.task_archive WHERE queue = 'pgb.ship'"))[0],
    }).toEqual({
      order: 'shipped',
      ghosts: 0,
      confirm: { pending: 0, running: 0, done: 1, dead: 0, cancelled: 0 },
      ship: { attempt: 2, state: 'done' },
    });
    await qa.close();
  });

  it('claims across 3 instances: 300 transactional tasks take effect exactly once, 300 lease tasks all run', async () => {
    const workers: LedgerWorker[] = [];
    for (const name of ['a', 'b', 'c']) {
      const w = await startLedgerWorker(name, bounced(), db.url, { databaseUrl: db.url, queues: { [LEDGER_TX]: { concurrency: 4 }, [LEDGER_LEASE]: { mode: 'lease', concurrency: 8 } } }, 1);
      workers.push(w);
      apps.push(w);
    }
    await workers[0].queue.enqueueMany([
      ...Array.from({ length: 300 }, (_, i) => ({ queue: LEDGER_TX, payload: { i } })),
      ...Array.from({ length: 300 }, (_, i) => ({ queue: LEDGER_LEASE, payload: { i } })),
    ]);
    await waitFor('both ledger queues to settle', async () => (await settled(db.sql, LEDGER_TX)) && (await settled(db.sql, LEDGER_LEASE)), { timeoutMs: 60_000 });
    const tx = await auditExactlyOnce(db.sql, LEDGER_TX);
    const lease = await auditAtLeastOnce(db.sql, LEDGER_LEASE);
    const byWorker = await db.sql<{ worker: string }>('SELECT DISTINCT worker FROM effect UNION SELECT DISTINCT worker FROM run');
    expect({
      tx: { ...tx, states: await queueStates(db.sql, LEDGER_TX) },
      lease: { neverRan: lease.never_ran, completingRunMissing: lease.completing_run_missing, states: await queueStates(db.sql, LEDGER_LEASE) },
    }).toEqual({
      tx: { effects: 300, missing: [], duplicated: [], wrong_attempt: [], orphans: 0, states: { pending: 0, running: 0, done: 300, dead: 0, cancelled: 0 } },
      lease: { neverRan: [], completingRunMissing: [], states: { pending: 0, running: 0, done: 300, dead: 0, cancelled: 0 } },
    });
    expect(byWorker.length).toBeGreaterThan(1); // the work was shared, not taken by one instance
    for (const w of workers) await w.close();
  }, 90_000);

  it('fencing: a worker whose lease was taken over changes nothing; its heartbeat reports the loss', async () => {
    const a = await boot({ autoStart: false, workerId: 'a' });
    const b = await boot({ autoStart: false, workerId: 'b' });
    const handlers = a.app.get(BouncedHandlers);
    const lost = nextEvents(a.queue.events$, (e) => e.type === 'lease-lost');
    const id = await a.queue.enqueue('pgb.slow', {});
    const drainingA = drainQueue(a.app, 'pgb.slow'); // a claims it; its handler waits
    await handlers.leaseStarted.promise;
    // The lease runs out (as if worker a had stalled); instance b rescues the task and runs it.
    await db.sql("UPDATE pgqueue.task SET locked_until = now() - interval '1 second' WHERE id = $1", [id]);
    expect(await rescueExpiredLeases(b.app)).toEqual({ rescued: 1, dead: 0 });
    await db.sql('UPDATE pgqueue.task SET run_at = now() WHERE id = $1', [id]); // skip the retry's backoff
    b.app.get(BouncedHandlers).leaseRelease.resolve();
    expect(await drainQueue(b.app, 'pgb.slow')).toBe(1);
    handlers.leaseRelease.resolve();
    await lost;
    await drainingA;
    const [row] = await db.sql('SELECT state, attempt FROM pgqueue.task_archive WHERE id = $1', [id]);
    expect({ row, heartbeat: (handlers.heartbeatError as Error)?.constructor.name }).toEqual({
      row: { state: 'done', attempt: 2 },
      heartbeat: 'LeaseLostError',
    });
    await a.close();
    await b.close();
  });

  it('schedules tick and run; poll-only mode (no LISTEN) picks up new tasks at its poll', async () => {
    // Without LISTEN a worker learns of a task enqueued elsewhere at its next poll (pollIntervalMs).
    const qa = await boot({ autoStart: true, databaseUrl: undefined, pollIntervalMs: 300 });
    expect(qa.app.get(WorkerOrchestrator).listening).toBe(false);
    await waitFor('a scheduled tick to run', async () => (await queueStates(db.sql, 'pgb.tick')).done >= 1, { timeoutMs: 15_000 });
    const done = nextEvents(qa.queue.events$, (e) => e.type === 'completed' && e.queue === 'pgb.confirm');
    const order = await db.sql("INSERT INTO orders (customer, amount_cents, updated_at) VALUES ('bob', 1, now()) RETURNING id");
    await qa.queue.enqueue('pgb.confirm', { orderId: order[0].id }, { delayMs: 200 });
    await done;
    expect((await db.sql('SELECT status FROM orders WHERE id = $1', [order[0].id]))[0].status).not.toBe('new');
    await qa.close();
  }, 30_000);

  it('shutdown: the running handler finishes before the app has closed; nothing stays running, LISTEN is closed', async () => {
    const qa = await boot({ autoStart: true, shutdownTimeoutMs: 5_000 });
    const handlers = qa.app.get(BouncedHandlers);
    await qa.queue.enqueue('pgb.slow', {});
    await handlers.leaseStarted.promise;
    const closing = qa.close();
    setTimeout(() => handlers.leaseRelease.resolve(), 200);
    await closing;
    expect(await db.sql("SELECT count(*)::int AS n FROM pgqueue.task WHERE state = 'running'")).toEqual([{ n: 0 }]);
    expect(qa.app.get(WorkerOrchestrator).listening).toBe(false);
  });
});
