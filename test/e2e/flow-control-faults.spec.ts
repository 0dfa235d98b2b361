/**
 * Flow control in the conditions production brings (issue 22, items 1-4): partitions whose work
 * sits behind many partitions with nothing due, tasks without a partition among busy tenants, a
 * business transaction holding a pending task's row, and an instance whose network dies while it
 * claims (or holds the queue's claim lock). Each would starve or freeze the queue before the round walked only
 * partitions with claimable work, claims skipped locked rows, and the claim lock was bounded.
 */
import { readFileSync } from 'node:fs';
import { Injectable } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import { TaskHandler, WorkerOrchestrator, type LeaseTaskContext, type Task } from '@app/pg-queue';
import { PrismaClient } from '../../src/generated/prisma/client';
import { ownerOf } from '../support/leftovers';
import { bootQueueApp, deferred, type QueueApp } from '../support/queue-app';
import { StallProxy } from '../support/stall-proxy';
import { queueStates } from '../support/task-ledger';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { pause, waitFor, within } from '../support/wait-for';

/** Every handler start, in order, across the instances of one test (one process). */
const started: { queue: string; partition: string | null; id: string }[] = [];

@Injectable()
class Handlers {
  @TaskHandler('fcf.round', { mode: 'lease' })
  async round(task: Task<{ p: string | null }>, _ctx: LeaseTaskContext) {
    started.push({ queue: task.queue, partition: task.payload.p, id: task.id });
  }

  @TaskHandler('fcf.turns', { mode: 'lease' })
  async turns(task: Task<{ p: string | null }>, _ctx: LeaseTaskContext) {
    started.push({ queue: task.queue, partition: task.payload.p, id: task.id });
    await pause(2);
  }

  @TaskHandler('fcf.locked', { mode: 'lease' })
  async locked(task: Task<{ p: string | null }>, _ctx: LeaseTaskContext) {
    started.push({ queue: task.queue, partition: task.payload.p, id: task.id });
  }

  @TaskHandler('fcf.big', { mode: 'lease' })
  async big(task: Task<{ p: string }>, _ctx: LeaseTaskContext) {
    started.push({ queue: task.queue, partition: null, id: task.id });
  }

  @TaskHandler('fcf.stall', { mode: 'lease' })
  async stall(task: Task<{ p: string | null }>, _ctx: LeaseTaskContext) {
    started.push({ queue: task.queue, partition: null, id: task.id });
    await pause(10);
  }
}

const QUEUES = {
  'fcf.round': { concurrency: 2, partitionConcurrency: 1 },
  'fcf.turns': { concurrency: 1, partitionConcurrency: 1 },
  'fcf.locked': { concurrency: 2, partitionConcurrency: 1 },
  'fcf.stall': { concurrency: 2, globalConcurrency: 2 },
  'fcf.big': { concurrency: 60, globalConcurrency: 60 },
};

const startsOf = (queue: string) => started.filter((s) => s.queue === queue);

describe('flow control in production conditions', () => {
  let db: TestDatabase;
  const apps: QueueApp[] = [];
  const boot = async (options: object = {}, prisma?: PrismaClient, on: TestDatabase = db) => {
    const qa = await bootQueueApp(prisma ?? on.prisma(6), [Handlers], { databaseUrl: on.url, queues: QUEUES, pollIntervalMs: 1000, ...options });
    apps.push(qa);
    return qa;
  };
  /** Closes the instances earlier tests booted: every instance handles every queue here, and some tests need theirs alone. */
  const alone = async () => {
    for (const qa of apps.splice(0)) await qa.close();
  };

  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    for (const qa of apps) await qa.close();
    await db.drop();
  });

  it('a round reaches partitions with due work behind 32 partitions holding only delayed tasks', async () => {
    const qa = await boot({ workerId: 'round' });
    // In key order: a00..a31 hold only tasks due in an hour, b0..b7 one due task each.
    await qa.queue.enqueueMany([
      ...Array.from({ length: 32 }, (_, i) => ({ queue: 'fcf.round', payload: { p: null }, options: { partition: `a${String(i).padStart(2, '0')}`, delayMs: 3_600_000 } })),
      ...Array.from({ length: 8 }, (_, i) => ({ queue: 'fcf.round', payload: { p: `b${i}` }, options: { partition: `b${i}` } })),
    ]);
    await waitFor('the 8 due tasks to run', async () => (await queueStates(db.sql, 'fcf.round')).done === 8, { timeoutMs: 20_000 });
    expect(await queueStates(db.sql, 'fcf.round')).toEqual({ pending: 32, running: 0, done: 8, dead: 0, cancelled: 0 });
  });

  it('tasks without a partition take turns as a partition of their own', async () => {
    // One instance: with two, handler starts may swap across instances (their claims keep the order).
    await alone();
    const qa = await boot({ workerId: 'turns', autoStart: false });
    await qa.queue.enqueueMany([
      ...['p1', 'p2', 'p3'].flatMap((p) => Array.from({ length: 30 }, () => ({ queue: 'fcf.turns', payload: { p }, options: { partition: p } }))),
      ...Array.from({ length: 5 }, () => ({ queue: 'fcf.turns', payload: { p: null } })),
    ]);
    await qa.app.get(WorkerOrchestrator).start();
    await waitFor('every task to run', async () => (await queueStates(db.sql, 'fcf.turns')).done === 95, { timeoutMs: 30_000 });
    // Four partitions take turns: the 5 unpartitioned tasks start within the first 5 rounds.
    const places = startsOf('fcf.turns').flatMap((s, i) => (s.partition === null ? [i + 1] : []));
    expect(places).toHaveLength(5);
    expect(Math.max(...places)).toBeLessThanOrEqual(20);
  });

  it("a business transaction holding one partition's pending task delays no other partition, and its new due time holds", async () => {
    const [a, b] = [await boot({ workerId: 'lock-a' }), await boot({ workerId: 'lock-b' })];
    const prisma = db.prisma(2);
    // Due in 1.5 s: the claim that wakes for it finds it locked by the transaction below.
    const keyed = await a.queue.enqueue('fcf.locked', { p: 'p1' }, { partition: 'p1', key: 'k', delayMs: 1500 });
    const release = deferred();
    let open = true;
    const business = prisma
      .$transaction(
        async (tx) => {
          await a.queue.enqueue('fcf.locked', { p: 'p1' }, { tx, partition: 'p1', key: 'k', onConflict: 'replace', delayMs: 3_600_000 });
          await release.promise;
        },
        { timeout: 30_000 },
      )
      .finally(() => (open = false));
    try {
      await pause(2000); // past the keyed task's old due time: a claim has met its locked row
      await b.queue.enqueueMany(Array.from({ length: 4 }, () => ({ queue: 'fcf.locked', payload: { p: 'p2' }, options: { partition: 'p2' } })));
      await waitFor("p2's tasks to run", () => startsOf('fcf.locked').filter((s) => s.partition === 'p2').length === 4, { timeoutMs: 8000 }).catch(() => undefined);
      expect({ p2Ran: startsOf('fcf.locked').filter((s) => s.partition === 'p2').length, whileOpen: open }).toEqual({ p2Ran: 4, whileOpen: true });
    } finally {
      release.resolve();
      await business;
    }
    // Its due time moved an hour on inside the transaction: no claim may run it now.
    await pause(1500);
    expect(startsOf('fcf.locked').filter((s) => s.id === keyed)).toEqual([]);
    const [row] = await db.sql("SELECT state, run_at > now() + interval '50 minutes' AS later FROM pgqueue.task WHERE id = $1", [keyed]);
    expect(row).toEqual({ state: 'pending', later: true });
  });

  it("an instance whose network dies while the server writes a claim's large reply stops no other instance: the server drops it (tcp_user_timeout), the claim rolls back", async () => {
    const proxy = new StallProxy(Number(new URL(db.url).port));
    await proxy.start();
    const viaProxy = new PrismaClient({ adapter: new PrismaPg({ connectionString: proxy.url(db.url), max: 6 }) });
    ownerOf.set(viaProxy, db.url);
    await alone();
    try {
      const a = await boot({ workerId: 'big-a', shutdownTimeoutMs: 2000 }, viaProxy);
      const b = await boot({ workerId: 'big-b', autoStart: false });
      // A's start-up claims (an empty queue) are over before the stall is armed, or the stall would
      // catch one of them, whose small reply never blocks (seen once under load): A listens, has
      // claimed, and has not claimed again for 300 ms. Its next claim is the one B's tasks wake.
      const lastClaim = async () => (await a.app.get(WorkerOrchestrator).health()).workers.find((w) => w.queue === 'fcf.big')?.lastClaimAt?.getTime() ?? null;
      await waitFor("A's start-up claims to be over", async () => {
        const before = await lastClaim();
        await pause(300);
        return a.app.get(WorkerOrchestrator).listening && before !== null && before === (await lastClaim());
      }, { timeoutMs: 15_000 });
      // The claim's call (its rules name replyMs) of fcf.big reaches the server; then A's network dies.
      const stalled = proxy.stallAfter('fcf.big', 'replyMs');
      // 60 tasks of 250 kB: a reply of 15 MB, more than the sockets' buffers hold.
      const n = 60;
      await b.queue.enqueueMany(Array.from({ length: n }, () => ({ queue: 'fcf.big', payload: { p: 'x'.repeat(250_000) } })));
      await within(stalled, 10_000, undefined);
      // The reply must outgrow what the sockets buffer for it, or the server never blocks: the
      // server's send buffer can grow to tcp_wmem's max, the proxy's receive buffer (not read while
      // stalled) stays near tcp_rmem's default.
      const [, wmemMax] = readFileSync('/proc/sys/net/ipv4/tcp_wmem', 'utf8').trim().split(/\s+/).map(Number).slice(1);
      const rmemDefault = Number(readFileSync('/proc/sys/net/ipv4/tcp_rmem', 'utf8').trim().split(/\s+/)[1]);
      expect(n * 250_000).toBeGreaterThan(2 * (wmemMax + rmemDefault));
      // The server ran the claim and blocks writing its reply, the queue's lock held.
      const writing = await waitFor(
        "A's claim to block on its reply",
        async () => {
          const rows = await db.sql<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE wait_event = 'ClientWrite' AND query LIKE '%claim_limited%'");
          return rows[0];
        },
        { timeoutMs: 10_000, everyMs: 100 },
      );
      const t0 = Date.now();
      await b.app.get(WorkerOrchestrator).start();
      await waitFor('instance B to run every task', async () => (await queueStates(db.sql, 'fcf.big')).done === n, { timeoutMs: 60_000 });
      const [gone] = await db.sql<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1', [writing.pid]);
      expect({ blockedBackendGone: gone.n === 0, byB: startsOf('fcf.big').length, within: Date.now() - t0 < 30_000 }).toEqual({ blockedBackendGone: true, byB: n, within: true });
      await a.close();
    } finally {
      proxy.resume();
      await proxy.close();
      await viaProxy.$disconnect().catch(() => undefined);
    }
  }, 120_000);

  /**
   * Instance A's statements go through a proxy that stalls (a black-holed network) at the claim of
   * fcf.stall. Under READ COMMITTED, the database's usual default, a limited claim is one
   * statement (claim_limited): the stall comes as A sends it, so only its health and its shutdown
   * are at stake here (a claim the server runs while A's network is dead: the large-reply case
   * above). Under another default the claim runs in a transaction of its own, and the stall comes
   * right after the statement that took the lock: A holds it, its transaction open, until the
   * server ends A's idle session.
   */
  it.each([
    ['read committed', 'as it sends its claim'],
    ['repeatable read', 'the claim lock held, its transaction open'],
  ])('default level %s: an instance whose network dies with %s stops no other instance; its health says so; it shuts down on time', async (level) => {
    const target = level === 'read committed' ? db : await createTestDatabase();
    if (target !== db) await target.sql(`ALTER DATABASE ${target.name} SET default_transaction_isolation = '${level}'`);
    const proxy = new StallProxy(Number(new URL(target.url).port));
    await proxy.start();
    const real = new PrismaClient({ adapter: new PrismaPg({ connectionString: proxy.url(target.url), max: 6 }) });
    ownerOf.set(real, target.url);
    let armed = false;
    const stalled = deferred();
    const isStallClaim = (sql: string, args: unknown[]) => armed && sql.includes('claim_limited') && args[0] === 'fcf.stall';
    const stallNow = () => {
      armed = false;
      proxy.stall();
      stalled.resolve();
    };
    /** `client` with its raw statements watched: `before` the claim is sent, or once it has returned. */
    const watched = <C extends object>(client: C, when: 'before' | 'after'): C =>
      new Proxy(client, {
        get(t, p) {
          const v = Reflect.get(t, p, t) as unknown;
          if (p !== '$queryRawUnsafe') return typeof v === 'function' ? v.bind(t) : v;
          const query = v as (sql: string, ...args: unknown[]) => Promise<unknown>;
          return async (sql: string, ...args: unknown[]) => {
            const stallHere = isStallClaim(sql, args);
            if (stallHere && when === 'before') stallNow();
            const out = await query.call(t, sql, ...args);
            if (stallHere && when === 'after') stallNow();
            return out;
          };
        },
      });
    const stallingClient =
      level === 'read committed'
        ? watched(real, 'before')
        : new Proxy(real, {
            get(t, p) {
              const v = Reflect.get(t, p, t);
              if (p !== '$transaction') return typeof v === 'function' ? v.bind(t) : v;
              return (fn: (tx: unknown) => Promise<unknown>, options: unknown) => v.call(t, (tx: PrismaClient) => fn(watched(tx, 'after')), options);
            },
          });
    try {
      const a = await boot({ workerId: 'stall-a', shutdownTimeoutMs: 2000, autoStart: false }, stallingClient as PrismaClient, target);
      const b = await boot({ workerId: 'stall-b', autoStart: false }, undefined, target);
      armed = true;
      await a.app.get(WorkerOrchestrator).start();
      await b.queue.enqueueMany(Array.from({ length: 10 }, () => ({ queue: 'fcf.stall', payload: { p: null } })));
      await within(stalled.promise, 10_000, undefined);
      expect(armed).toBe(false); // A's claim is behind a dead network
      await b.app.get(WorkerOrchestrator).start();
      await waitFor('instance B to run every task', async () => (await queueStates(target.sql, 'fcf.stall')).done === 10, { timeoutMs: 30_000 });

      // A's claim is still in flight behind the stall: once past its bounds, its health says so.
      const stuck = await waitFor(
        "A's health to report its stuck claim",
        async () => {
          const health = await a.app.get(WorkerOrchestrator).health(500);
          const worker = health.workers.find((w) => w.queue === 'fcf.stall');
          return worker && !worker.alive && { database: health.database.up, error: worker.lastClaimError };
        },
        { timeoutMs: 30_000, everyMs: 500 },
      );
      expect(stuck).toEqual({ database: false, error: expect.stringMatching(/claim of "fcf.stall" in flight for \d+ ms/) });

      const t0 = Date.now();
      const closed = await within(
        a.close().then(() => 'closed'),
        15_000,
        'still closing',
      );
      expect({ closed, withinDeadline: Date.now() - t0 < 2000 + 5000 }).toEqual({ closed: 'closed', withinDeadline: true });
    } finally {
      proxy.resume();
      await proxy.close();
      await real.$disconnect().catch(() => undefined);
      if (target !== db) {
        for (const qa of apps.splice(0)) await qa.close();
        await target.drop();
      }
    }
  }, 90_000);
});
