import { Injectable } from '@nestjs/common';
import { TaskHandler, type Task, type TaskContext } from '@app/pg-queue';
import { listenerName } from '../../libs/pg-queue/src/worker/instance.liveness';
import type { Prisma } from '../../src/generated/prisma/client';
import { killFixtureProcesses, startFixtureProcess, type FixtureProcess } from '../support/fixture-process';
import { LIVENESS_LEASE_MS, LIVENESS_QUEUES } from '../support/liveness';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { StallProxy } from '../support/stall-proxy';
import { queueStates } from '../support/task-ledger';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

/**
 * Issue 26: an instance that dies (SIGKILL) gives its claims and limit slots back within seconds,
 * not a lease: Postgres ends its LISTEN session, and the other instances' rescuers take back the
 * running tasks of an instance whose session has been gone past its window (deadInstanceAfterMs) while it said nothing.
 * The holder is a worker process (test/fixtures/liveness-worker.ts) whose handlers never return;
 * the other instances run in this process. Leases are a minute long: every test here ends before one
 * would expire, so only the liveness rescue can explain a task taken over.
 */

@Injectable()
class Survivor {
  @TaskHandler('live.tx')
  async tx(task: Task<{ customer: string }>, ctx: TaskContext<Prisma.TransactionClient>) {
    await ctx.tx.order.create({ data: { customer: task.payload.customer, amountCents: 1 } });
  }

  @TaskHandler('live.limited')
  async limited(task: Task<{ customer: string }>, ctx: TaskContext<Prisma.TransactionClient>) {
    await ctx.tx.order.create({ data: { customer: task.payload.customer, amountCents: 1 } });
  }

  @TaskHandler('live.lease')
  async lease() {}
}

describe('dead instances: claims and limit slots back within seconds, fenced', () => {
  let db: TestDatabase;
  /** Another instance with no handlers: its rescuer runs every 500 ms. */
  let watcher: QueueApp;

  beforeAll(async () => {
    db = await createTestDatabase();
    watcher = await bootQueueApp(db.prisma(4), [], { databaseUrl: db.url, workerId: 'watcher', rescueIntervalMs: 500 });
  });
  afterAll(async () => {
    await killFixtureProcesses();
    await watcher?.close();
    await db?.drop();
  });

  const holding = (p: FixtureProcess) => p.output().split('\n').filter((l) => l.startsWith('HOLDING')).length;
  const startHolder = async (worker: string, options: { listen: boolean; listenUrl?: string; deadInstanceAfterMs?: number }, holds: number) => {
    const p = startFixtureProcess('liveness-worker', [JSON.stringify({ url: db.url, worker, ...options })]);
    await p.line('READY', 30_000);
    await waitFor(`${worker} to hold ${holds} claims in its handlers`, () => holding(p) === holds, { timeoutMs: 30_000 });
    return p;
  };
  const claimsOf = (worker: string) =>
    db.sql<{ id: string; lease_token: string }>("SELECT id::text, lease_token::text FROM pgqueue.task WHERE state = 'running' AND locked_by = $1 ORDER BY id", [worker]);
  const registered = async (worker: string) => (await db.sql('SELECT 1 FROM pgqueue.instance_session WHERE instance = $1', [worker])).length === 1;
  /** Several of the watcher's rescue passes, and several times the holder's window. */
  const watch = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  it('without databaseUrl an instance is never judged: a killed one\'s claims wait for their leases', async () => {
    await watcher.queue.enqueueMany(Array.from({ length: 5 }, (_, i) => ({ queue: 'live.tx' as const, payload: { customer: `c-tx-${i}` } })));
    const holder = await startHolder('holder-c', { listen: false, deadInstanceAfterMs: 2000 }, 5);
    const claims = await claimsOf('holder-c');
    expect(claims).toHaveLength(5);
    expect(await registered('holder-c')).toBe(false);
    await holder.kill();
    await watch(6000);
    expect(await claimsOf('holder-c')).toEqual(claims);
  }, 60_000);

  it('a live instance keeps its claims, its LISTEN session up or dropped and back; killed, they come back', async () => {
    await watcher.queue.enqueueMany(Array.from({ length: 5 }, (_, i) => ({ queue: 'live.tx' as const, payload: { customer: `b-tx-${i}` } })));
    await watcher.queue.enqueueMany(Array.from({ length: 5 }, (_, i) => ({ queue: 'live.lease' as const, payload: { customer: `b-lease-${i}` } })));
    const holder = await startHolder('holder-b', { listen: true, deadInstanceAfterMs: 2000 }, 10);
    const claims = await claimsOf('holder-b');
    expect(claims).toHaveLength(10);
    await waitFor('holder-b registered', () => registered('holder-b')).catch((err: Error) => Promise.reject(new Error(`${err.message}\n${holder.output()}`)));

    // Up: several passes of the watcher and three times the window; nothing taken.
    await watch(6000);
    expect(await claimsOf('holder-b')).toEqual(claims);

    // Its LISTEN session dropped (the backend ended): it reconnects, and loses nothing.
    const name = listenerName('pgqueue', 'holder-b');
    const [ended] = await db.sql(
      'WITH l AS MATERIALIZED (SELECT pid FROM pg_stat_activity WHERE application_name = $1) SELECT count(*)::int AS n FROM l WHERE pg_terminate_backend(pid)',
      [name],
    );
    expect(ended.n).toBe(1);
    await waitFor('holder-b\'s LISTEN session back', async () => (await db.sql('SELECT 1 FROM pg_stat_activity WHERE application_name = $1', [name])).length === 1);
    await watch(6000);
    expect(await claimsOf('holder-b')).toEqual(claims);

    // Killed: back to pending within seconds (the watcher runs no handler), lease and transactional alike.
    await holder.kill();
    const killedAt = Date.now();
    await waitFor('holder-b\'s claims rescued', async () => (await claimsOf('holder-b')).length === 0, { timeoutMs: LIVENESS_LEASE_MS - 15_000 });
    const rescuedMs = Date.now() - killedAt;
    console.log(`SIGKILL → holder-b's 10 claims rescued: ${rescuedMs} ms (deadInstanceAfterMs 2000 ms, lease ${LIVENESS_LEASE_MS} ms)`);
    expect(rescuedMs).toBeLessThan(15_000);
    expect(await db.sql("SELECT queue, state, attempt, count(*)::int AS n FROM pgqueue.task WHERE payload->>'customer' LIKE 'b-%' GROUP BY 1, 2, 3 ORDER BY 1")).toEqual([
      { queue: 'live.lease', state: 'pending', attempt: 1, n: 5 },
      { queue: 'live.tx', state: 'pending', attempt: 1, n: 5 },
    ]);
  }, 90_000);

  it('a killed instance holding 20 claims and a limited queue\'s every slot: all done by another within seconds, each write once', async () => {
    await watcher.queue.enqueueMany(Array.from({ length: 20 }, (_, i) => ({ queue: 'live.tx' as const, payload: { customer: `a-tx-${i}` } })));
    await watcher.queue.enqueueMany(Array.from({ length: 9 }, (_, i) => ({ queue: 'live.limited' as const, payload: { customer: `a-lim-${i}` } })));
    // The 5 of holder-b still pending, these 20, and the 3 slots of live.limited (globalConcurrency
    // 3): all inside their handlers' transactions.
    const holder = await startHolder('holder-a', { listen: true, deadInstanceAfterMs: 5000 }, 5 + 5 + 20 + 3);
    await waitFor('holder-a registered', () => registered('holder-a'));
    const survivor = await bootQueueApp(db.prisma(20), [Survivor], { databaseUrl: db.url, workerId: 'survivor', rescueIntervalMs: 500, queues: LIVENESS_QUEUES });
    try {
      await holder.kill();
      const killedAt = Date.now();
      let limitedDoneMs = 0;
      await waitFor(
        'every task done by the survivor',
        async () => {
          const [tx, limited] = [await queueStates(db.sql, 'live.tx'), await queueStates(db.sql, 'live.limited')];
          if (limited.done === 9 && !limitedDoneMs) limitedDoneMs = Date.now() - killedAt;
          return tx.done === 25 && limited.done === 9;
        },
        // Inside the lease: without the liveness rescue, nothing comes back before LIVENESS_LEASE_MS.
        { timeoutMs: LIVENESS_LEASE_MS - 15_000, everyMs: 100 },
      );
      const allDoneMs = Date.now() - killedAt;
      console.log(`SIGKILL → holder-a's 33 claims done elsewhere: ${allDoneMs} ms (the limited queue's 9 tasks: ${limitedDoneMs} ms); deadInstanceAfterMs 5000 ms, lease ${LIVENESS_LEASE_MS} ms`);
      // Generous for a loaded machine (6.6 s alone, 11 s after heavy specs); a lease would take a minute.
      expect(allDoneMs).toBeLessThan(25_000);

      // The killed attempts' writes rolled back with their connections: each task wrote once.
      const orders = await db.sql("SELECT customer, count(*)::int AS n FROM orders WHERE customer LIKE 'a-%' OR customer LIKE 'b-tx-%' GROUP BY 1");
      expect(orders).toHaveLength(20 + 9 + 5);
      expect(orders.filter((o) => o.n !== 1)).toEqual([]);
      const rescued = await db.sql("SELECT attempt, last_error FROM pgqueue.task_archive WHERE last_error LIKE '%holder-a%'");
      expect(rescued).toHaveLength(33);
      for (const r of rescued) expect(r.last_error).toMatch(/^instance gone: worker holder-a lost its database session before it finished attempt \d$/);
      // A dead instance is forgotten once it holds nothing.
      await waitFor('holder-a forgotten', async () => !(await registered('holder-a')), { timeoutMs: 10_000 });
    } finally {
      await survivor.close();
    }
  }, 90_000);
  it('a live instance whose LISTEN connection stays down for many times its deadInstanceAfterMs keeps its claims (it says so through its pool); killed, they come back at once', async () => {
    // Its LISTEN connection goes through a proxy the test cuts; its Prisma pool connects directly.
    const proxy = new StallProxy(Number(new URL(db.url).port));
    await proxy.start();
    try {
      await watcher.queue.enqueueMany(Array.from({ length: 5 }, (_, i) => ({ queue: 'live.tx' as const, payload: { customer: `d-tx-${i}` } })));
      await watcher.queue.enqueueMany(Array.from({ length: 5 }, (_, i) => ({ queue: 'live.lease' as const, payload: { customer: `d-lease-${i}` } })));
      const holder = await startHolder('holder-d', { listen: true, listenUrl: proxy.url(db.url), deadInstanceAfterMs: 1000 }, 10);
      const claims = await claimsOf('holder-d');
      expect(claims).toHaveLength(10);
      await waitFor('holder-d registered', () => registered('holder-d'));

      // No LISTEN for 6 s, six times its window: pg-listen retries and is refused, the watcher's
      // rescuer finds its session gone on a dozen passes, and takes nothing.
      const name = listenerName('pgqueue', 'holder-d');
      proxy.refuse();
      await waitFor('holder-d\'s LISTEN session gone', async () => (await db.sql('SELECT 1 FROM pg_stat_activity WHERE application_name = $1', [name])).length === 0);
      await watch(6000);
      expect(await claimsOf('holder-d')).toEqual(claims);
      const [row] = await db.sql('SELECT missing_since IS NOT NULL AS missing, reconnecting_until > now() AS reconnecting FROM pgqueue.instance_session WHERE instance = $1', ['holder-d']);
      expect(row).toEqual({ missing: true, reconnecting: true });

      // Back: registered anew, no longer reconnecting.
      proxy.admit();
      await waitFor('holder-d\'s LISTEN session back', async () => (await db.sql('SELECT 1 FROM pg_stat_activity WHERE application_name = $1', [name])).length === 1, { timeoutMs: 15_000 });
      await waitFor('holder-d registered again', async () =>
        (await db.sql('SELECT 1 FROM pgqueue.instance_session WHERE instance = $1 AND missing_since IS NULL AND reconnecting_until IS NULL', ['holder-d'])).length === 1,
      );
      expect(await claimsOf('holder-d')).toEqual(claims);

      // Killed, saying nothing: its claims back after its window, not a reconnect's grace.
      await holder.kill();
      const killedAt = Date.now();
      await waitFor('holder-d\'s claims rescued', async () => (await claimsOf('holder-d')).length === 0, { timeoutMs: LIVENESS_LEASE_MS - 15_000 });
      const rescuedMs = Date.now() - killedAt;
      console.log(`SIGKILL → holder-d's 10 claims rescued: ${rescuedMs} ms (deadInstanceAfterMs 1000, the watcher's rescuer every 500 ms)`);
      expect(rescuedMs).toBeLessThan(8000);
    } finally {
      await proxy.close();
    }
  }, 90_000);
});
