import { Injectable } from '@nestjs/common';
import { RateLimitedError, TaskHandler, type LeaseTaskContext, type Task, type TaskContext } from '@app/pg-queue';
import { WorkerOrchestrator } from '../../libs/pg-queue/src/worker/worker.orchestrator';
import { PrismaPg } from '@prisma/adapter-pg';
import { PrismaClient, type Prisma } from '../../src/generated/prisma/client';
import { bootQueueApp, deferred, type QueueApp } from '../support/queue-app';
import { StallProxy } from '../support/stall-proxy';
import { queueStates } from '../support/task-ledger';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

/**
 * Issue 26: an instance cut off from the database (every connection through a proxy that drops
 * them and refuses new ones for a while, as in a failover or a network cut) gives back, as soon as
 * its LISTEN connection is back, the claims whose attempts ended while it was cut off, fenced by
 * token, instead of letting them wait out their leases. Leases here are a minute long; the
 * instance's rescuer runs once a minute, so only the reconnect can explain tasks back in seconds.
 */
const LEASE_MS = 60_000;
const TASKS = 8;

@Injectable()
class CutHandlers {
  started = 0;

  /** The first attempt waits in a statement of its transaction until the connection is cut; the second writes. */
  @TaskHandler('cut.tx', { concurrency: TASKS, leaseMs: LEASE_MS, timeoutMs: 300_000 })
  async tx(task: Task<{ customer: string }>, ctx: TaskContext<Prisma.TransactionClient>) {
    if (task.attempt === 1) {
      this.started++;
      await ctx.tx.$queryRawUnsafe('SELECT pg_sleep(600)');
    }
    await ctx.tx.order.create({ data: { customer: task.payload.customer, amountCents: 1 } });
  }
}

/**
 * For a describe: a database, a proxy in front of it (what the tests cut), and the instance's
 * Prisma pool through the proxy; the worker a test boots is closed after it.
 */
function behindProxy(poolMax: number) {
  const env = {} as { db: TestDatabase; proxy: StallProxy; prisma: PrismaClient; worker?: QueueApp };
  beforeAll(async () => {
    env.db = await createTestDatabase();
    env.proxy = new StallProxy(Number(new URL(env.db.url).port));
    await env.proxy.start();
    env.prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: env.proxy.url(env.db.url), max: poolMax }) });
  });
  afterAll(async () => {
    await env.worker?.close();
    await env.prisma?.$disconnect();
    await env.proxy?.close();
    await env.db?.drop();
  });
  return env;
}

/** What the instance owes the database (OwedOutcomes). */
const owedBy = (worker: QueueApp) => (worker.app.get(WorkerOrchestrator) as unknown as { deps: { owed: { size: number } } }).deps.owed.size;

describe('an instance cut off from the database gives back what ended meanwhile once it reconnects', () => {
  const env = behindProxy(TASKS + 6);

  it('transactional attempts that failed with the connection: failed and retried seconds after it is back, each write once', async () => {
    const { db, proxy, prisma } = env;
    // Its rescuer would write what is owed too, but not within this test: only the reconnect can.
    const worker = (env.worker = await bootQueueApp(prisma, [CutHandlers], { databaseUrl: proxy.url(db.url), workerId: 'cut', rescueIntervalMs: LEASE_MS, pollIntervalMs: 500 }));
    const handlers = worker.app.get(CutHandlers);
    const owed = () => owedBy(worker);

    await worker.queue.enqueueMany(Array.from({ length: TASKS }, (_, i) => ({ queue: 'cut.tx' as const, payload: { customer: `cut-${i}` } })));
    await waitFor('every first attempt inside its statement', () => handlers.started === TASKS);
    expect((await queueStates(db.sql, 'cut.tx')).running).toBe(TASKS);

    // Cut: every connection of the instance dropped, new ones refused; the server side of the
    // statements the proxy cut ends too.
    const port = proxy.port;
    await proxy.close();
    await db.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(600)%' AND pid <> pg_backend_pid()");
    await waitFor('the failed attempts owed to the database', () => owed() === TASKS, { timeoutMs: 30_000 });
    expect((await queueStates(db.sql, 'cut.tx')).running).toBe(TASKS); // nothing could be written

    await proxy.start(port);
    const backAt = Date.now();
    await waitFor('every task done', async () => (await queueStates(db.sql, 'cut.tx')).done === TASKS, { timeoutMs: LEASE_MS - 15_000 });
    const doneMs = Date.now() - backAt;
    console.log(`connection back → the ${TASKS} cut-off claims done: ${doneMs} ms (lease ${LEASE_MS} ms)`);
    expect(doneMs).toBeLessThan(15_000);
    expect(owed()).toBe(0);
    const orders = await db.sql("SELECT customer, count(*)::int AS n FROM orders WHERE customer LIKE 'cut-%' GROUP BY 1");
    expect(orders).toHaveLength(TASKS);
    expect(orders.filter((o) => o.n !== 1)).toEqual([]);
    // The cut attempt counted as a failure (its error recorded), the second one did the work.
    const rows = await db.sql("SELECT attempt, last_error FROM pgqueue.task_archive WHERE queue = 'cut.tx'");
    expect(rows.map((r) => r.attempt)).toEqual(Array(TASKS).fill(2));
  }, 90_000);
});

/** Its attempt waits until the connection is cut, then meets a 429 that asks for 30 s. */
const backOffGate = deferred();
let backOffCalls = 0;

@Injectable()
class CutBackOffHandlers {
  @TaskHandler('cut.backoff', { mode: 'lease', leaseMs: LEASE_MS })
  async backOff(_task: Task, _ctx: LeaseTaskContext) {
    backOffCalls++;
    await backOffGate.promise;
    throw new RateLimitedError({ retryAfterMs: 30_000, scope: 'queue', reason: 'downstream 429' });
  }
}

describe('a back-off that could not be written while cut off', () => {
  // Before the worker closes (afterAll hooks run in the order declared): a handler still waiting
  // at the gate would hold its shutdown.
  afterAll(() => backOffGate.resolve());
  const env = behindProxy(6);

  it('is written as a back-off once the connection is back: its end and scope kept, not a release due at once', async () => {
    const { db, proxy, prisma } = env;
    const worker = (env.worker = await bootQueueApp(prisma, [CutBackOffHandlers], { databaseUrl: proxy.url(db.url), workerId: 'cut-bo', rescueIntervalMs: LEASE_MS, pollIntervalMs: 500 }));
    const owed = () => owedBy(worker);
    const [id] = await worker.queue.enqueueMany([{ queue: 'cut.backoff' as const, payload: {} }]);
    await waitFor('the attempt running', () => backOffCalls === 1);

    const port = proxy.port;
    await proxy.close();
    backOffGate.resolve(); // the 429 comes while the database cannot be reached
    await waitFor('the back-off owed to the database', () => owed() === 1, { timeoutMs: 30_000 });
    // Another app enqueues meanwhile: no claim of this instance may take it before the back-off's
    // row is written (which waits for the database), or it would call the downstream again.
    await db.sql(`INSERT INTO pgqueue.task (queue, payload) VALUES ('cut.backoff', '{}')`);

    await proxy.start(port);
    await waitFor('what was owed written', () => owed() === 0, { timeoutMs: 30_000 });
    const [task] = await db.sql<{ state: string; attempt: number; due_in_s: number }>(
      'SELECT state, attempt, extract(epoch FROM run_at - now())::float8 AS due_in_s FROM pgqueue.task WHERE id = $1',
      [id],
    );
    // Released, it would be due at once and run again against a downstream still saying 429.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect({ calls: backOffCalls, state: task.state, attempt: task.attempt, dueLater: task.due_in_s > 5 }).toEqual({ calls: 1, state: 'pending', attempt: 0, dueLater: true });
    expect(await db.sql("SELECT scope, name, reason FROM pgqueue.backoff")).toEqual([{ scope: 'queue', name: 'cut.backoff', reason: 'downstream 429' }]);
  }, 90_000);
});
