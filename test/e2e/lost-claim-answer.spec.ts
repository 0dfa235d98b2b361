import { Injectable } from '@nestjs/common';
import { TaskHandler, type Task } from '@app/pg-queue';
import { PrismaPg } from '@prisma/adapter-pg';
import { Client } from 'pg';
import { PrismaClient } from '../../src/generated/prisma/client';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { StallProxy } from '../support/stall-proxy';
import { queueStates } from '../support/task-ledger';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

/**
 * Issue 26: a claim that committed but whose answer never reached the instance (the connection
 * broke in between, as in a failover or a network cut). The instance holds those rows without
 * knowing them; it knows the claim's token, so once the database answers again it gives them back
 * uncounted instead of letting them wait out their leases. Leases here are a minute long and the
 * rescuer runs once a minute: only the give-back can explain the tasks done in seconds.
 *
 * How the answer is lost: a test session holds queue_pause's lock, which every claim reads, so
 * the worker's claim waits inside the server; the proxy then stops forwarding, the lock is let
 * go, the claim commits and its answer is held in the proxy; then every connection through the
 * proxy is cut.
 */
const LEASE_MS = 60_000;
const TASKS = 6;

@Injectable()
class LostClaimHandlers {
  readonly runs = new Map<string, number>();

  @TaskHandler('lost.lease', { mode: 'lease', concurrency: TASKS, leaseMs: LEASE_MS })
  async lease(task: Task<{ n: number }>) {
    this.runs.set(`lease-${task.payload.n}`, (this.runs.get(`lease-${task.payload.n}`) ?? 0) + 1);
  }

  @TaskHandler('lost.tx', { mode: 'transactional', concurrency: TASKS, leaseMs: LEASE_MS })
  async tx(task: Task<{ n: number }>) {
    this.runs.set(`tx-${task.payload.n}`, (this.runs.get(`tx-${task.payload.n}`) ?? 0) + 1);
  }
}

describe('a claim whose answer was lost with the connection', () => {
  let db: TestDatabase;
  let proxy: StallProxy;
  let prisma: PrismaClient;
  let worker: QueueApp;
  let locker: Client;

  beforeAll(async () => {
    db = await createTestDatabase();
    proxy = new StallProxy(Number(new URL(db.url).port));
    await proxy.start();
    prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: proxy.url(db.url), max: 10 }) });
    worker = await bootQueueApp(prisma, [LostClaimHandlers], { databaseUrl: proxy.url(db.url), workerId: 'lost', rescueIntervalMs: LEASE_MS, pollIntervalMs: 500 });
    locker = new Client({ connectionString: db.url });
    await locker.connect();
  });
  afterAll(async () => {
    await locker?.end();
    await worker?.close();
    await prisma?.$disconnect();
    await proxy?.close();
    await db?.drop();
  });

  it.each(['lease', 'tx'])('%s mode: the rows it took come back uncounted within seconds, each task run once', async (mode) => {
    const queue = `lost.${mode}` as 'lost.lease' | 'lost.tx';
    const handlers = worker.app.get(LostClaimHandlers);
    await locker.query('BEGIN');
    await locker.query('LOCK TABLE pgqueue.queue_pause IN ACCESS EXCLUSIVE MODE');
    await worker.queue.enqueueMany(Array.from({ length: TASKS }, (_, n) => ({ queue, payload: { n } })));
    await waitFor('the claim waiting in the server', async () => {
      const [{ n }] = await db.sql<{ n: number }>(
        // (pg_stat_activity shows a statement's first 1 024 bytes: the claim's opening.)
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '/* pg-queue */%WITH next AS (%'",
      );
      return n > 0;
    });

    proxy.stall();
    await locker.query('COMMIT');
    // (A transactional worker may claim fewer than all at once: what it took is what it lost.)
    await waitFor('the claim committed (its answer held in the proxy)', async () => (await queueStates(db.sql, queue)).running > 0);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const lost = (await queueStates(db.sql, queue)).running;

    const port = proxy.port;
    await proxy.close();
    proxy.resume(); // new connections are forwarded again
    await proxy.start(port);
    const cutAt = Date.now();
    await waitFor('every task done', async () => (await queueStates(db.sql, queue)).done === TASKS, { timeoutMs: 30_000 });
    const doneMs = Date.now() - cutAt;
    console.log(`${mode}: connection cut with a claim's answer in flight → its ${lost} claimed tasks and the rest (${TASKS} in all) done: ${doneMs} ms (lease ${LEASE_MS} ms)`);
    expect(doneMs).toBeLessThan(20_000);

    // Given back uncounted: the attempt that ran is the first; no task ran twice.
    const rows = await db.sql<{ attempt: number }>('SELECT attempt FROM pgqueue.task_archive WHERE queue = $1', [queue]);
    expect(rows.map((r) => r.attempt)).toEqual(Array(TASKS).fill(1));
    expect(Array.from({ length: TASKS }, (_, n) => handlers.runs.get(`${mode}-${n}`))).toEqual(Array(TASKS).fill(1));
  }, 90_000);
});
