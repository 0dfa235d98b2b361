import { Injectable } from '@nestjs/common';
import type { Pool } from 'pg';
import { TaskHandler, WorkerOrchestrator, type Task, type TaskContext } from '@app/pg-queue';
import type { Prisma } from '../../src/generated/prisma/client';
import { FailoverStage, startFailoverWorkers } from '../support/failover-fleet';
import { LEDGER_LEASE, LEDGER_TX } from '../support/ledger-handlers';
import { orderTaskPairs, produceOrders } from '../support/order-producer';
import { bootQueueApp, nextEvents, type QueueApp } from '../support/queue-app';
import { auditAtLeastOnce, auditExactlyOnce, queueStates, recordEffect, recordRun } from '../support/task-ledger';
import { pause, waitFor } from '../support/wait-for';

/**
 * Issue 26: a failover. A primary with a synchronous standby (test/support/replicated-pair.ts);
 * the apps reach them through a proxy that stands for the moving address (a VIP, DNS, a pooler).
 * Polls are 30 s apart, so only NOTIFY explains a new task started in milliseconds. Leases are
 * 10 s: a claim whose answer was lost when its connection broke (it may have committed) is known to
 * no instance and waits out its lease (not fixed yet: issue 26), and the spec's bounds allow for it;
 * everything else comes back when the instances reconnect.
 *
 * 1. The address points at the standby, not promoted, for a while (a VIP moved too early): every
 *    write fails read-only (25006). Attempts caught by it go back uncounted (their tasks finish by
 *    their first counted attempt), at once when the address is back, not after their leases.
 * 2. While 3 instances drain both modes and a producer enqueues inside business transactions, the
 *    primary crashes (`pg_ctl stop -m immediate`); the address moves to the standby, which is
 *    promoted a moment later. Every enqueue that committed runs; transactional effects once; no
 *    instance restarted; LISTEN back on the new primary; all done within seconds.
 */
const POLL_MS = 30_000;
const LEASE_MS = 10_000;
/** The rescuer's pass (it also writes what an instance owes: see OwedOutcomes) every second. */
const RESCUE_MS = 1000;
const ORDERS = 600;
const CRASH_AFTER = 200;

type Sql = <T = any>(text: string, values?: unknown[]) => Promise<T[]>;

const RO_LEASE = 'ro.lease';
const RO_TX = 'ro.tx';
const RO_TASKS = 300; // per queue: about 3 s of work each, the address moves in the middle

/** Handlers that meet the read-only standby: work first, then write through the moving address. */
@Injectable()
class ReadOnlyHandlers {
  runs: Pool | null = null;
  /** Tasks whose handler's write was refused read-only (the scenario really hit them). */
  readonly refused = new Set<string>();

  @TaskHandler(RO_LEASE, { mode: 'lease', concurrency: 10, leaseMs: LEASE_MS })
  async lease(task: Task) {
    await pause(100);
    await recordRun(this.runs!, task, 'ro').catch((err: { code?: string }) => {
      if (err.code === '25006') this.refused.add(task.id);
      throw err;
    });
  }

  @TaskHandler(RO_TX, { concurrency: 4, leaseMs: LEASE_MS })
  async tx(task: Task, ctx: TaskContext<Prisma.TransactionClient>) {
    await recordEffect(ctx.tx, task, 'ro');
    await pause(40);
  }
}

describe('failover: the address moves to a synchronous standby', () => {
  let stage: FailoverStage;
  const sql: Sql = (text, values) => stage.sql(text, values);

  beforeAll(async () => {
    stage = await FailoverStage.start('failover');
  }, 120_000);
  afterAll(() => stage?.close());

  it('a standby not promoted yet behind the address: attempts that meet it go back uncounted, none fails', async () => {
    const app = await bootQueueApp(stage.clients.prisma(16, 'ro worker'), [ReadOnlyHandlers], { databaseUrl: stage.url, pollIntervalMs: POLL_MS, rescueIntervalMs: RESCUE_MS, workerId: 'ro', autoStart: false });
    stage.apps.push(app);
    const handlers = app.app.get(ReadOnlyHandlers);
    handlers.runs = stage.clients.pool(10, 'ro ledger');
    const orchestrator = app.app.get(WorkerOrchestrator);
    try {
      await meetReadOnlyStandby(app, handlers, orchestrator);
    } finally {
      await app.close(); // before the next test counts listeners
    }
  }, 90_000);

  async function meetReadOnlyStandby(app: QueueApp, handlers: ReadOnlyHandlers, orchestrator: WorkerOrchestrator): Promise<void> {
    for (const queue of [RO_LEASE, RO_TX]) await app.queue.enqueueMany(Array.from({ length: RO_TASKS }, (_, n) => ({ queue, payload: { n } })));
    await orchestrator.start();
    await waitFor('work under way in both modes', async () => (await queueStates(sql, RO_LEASE)).done >= 30 && (await queueStates(sql, RO_TX)).done >= 30);

    stage.proxy.repoint(stage.pair.standby.port);
    // Down while it lasts: LISTEN is refused (reads still answer).
    const during = await waitFor('health to report the outage', async () => {
      const h = await orchestrator.health(1000);
      return h.listen !== 'connected' ? h : null;
    });
    await pause(1500);
    stage.proxy.repoint(stage.pair.primary.port);

    await waitFor('both queues to finish', async () => {
      const s = [await queueStates(sql, RO_LEASE), await queueStates(sql, RO_TX)];
      return s.every((q) => q.pending + q.running === 0) ? s : null;
    }, { timeoutMs: 45_000, everyMs: 250 });
    console.log(`read-only standby behind the address: ${handlers.refused.size} task(s) whose handler's write was refused read-only; health during: listen ${during.listen}, database ${during.database.up ? 'up' : 'down'}`);
    expect(handlers.refused.size).toBeGreaterThan(0);
    // Given back uncounted: each of them finished by its first counted attempt.
    const attempts = await sql<{ attempt: number; n: number }>('SELECT attempt, count(*)::int AS n FROM pgqueue.task_archive WHERE id = ANY($1::bigint[]) GROUP BY 1', [[...handlers.refused]]);
    expect(attempts).toEqual([{ attempt: 1, n: handlers.refused.size }]);
    for (const queue of [RO_LEASE, RO_TX]) {
      expect({ queue, ...(await queueStates(sql, queue)) }).toEqual({ queue, pending: 0, running: 0, done: RO_TASKS, dead: 0, cancelled: 0 });
    }
    expect(await auditExactlyOnce(sql, RO_TX)).toEqual({ effects: RO_TASKS, missing: [], duplicated: [], wrong_attempt: [], orphans: 0 });
    expect(await auditAtLeastOnce(sql, RO_LEASE)).toMatchObject({ never_ran: [], completing_run_missing: [] });
    await waitFor('health back up', async () => {
      const h = await orchestrator.health(1000);
      return h.database.up && h.listen === 'connected' && h.workers.every((w) => w.alive);
    });
  }

  it('the primary crashes mid-drain and the standby is promoted: every committed enqueue runs, effects once, all done in seconds', async () => {
    const { workers, completions } = await startFailoverWorkers(['w1', 'w2', 'w3'], stage.clients, stage.url, { pollIntervalMs: POLL_MS, rescueIntervalMs: RESCUE_MS, leaseMs: LEASE_MS, poolSize: 14 });
    stage.apps.push(...workers);

    // The producer: an order and its task in one business transaction, through the moving address.
    const producerPrisma = stage.clients.prisma(4, 'producer');
    const producer = await bootQueueApp(producerPrisma, [], { autoStart: false });
    stage.apps.push(producer);
    const producedFrom = Date.now();
    const orders = produceOrders(producerPrisma, producer.queue, { count: ORDERS, prefix: 'fo-', queues: [LEDGER_TX, LEDGER_LEASE], stopped: () => stage.ended });
    const committed = orders.committed;

    await waitFor('orders before the crash', () => committed.length >= CRASH_AFTER, { timeoutMs: 30_000, everyMs: 20 });
    const sync = await sql<{ sync_state: string }>('SELECT sync_state FROM pg_stat_replication');
    expect(sync.map((r) => r.sync_state)).toEqual(['sync']);
    const crashAt = Date.now();
    const beforeCrash = new Set(committed.map((o) => o.id));
    await stage.pair.crashPrimary();
    const health = workers[0].orchestrator;
    const down = await waitFor('health to report the database down', async () => {
      const h = await health.health(1000);
      return h.database.up ? null : h;
    }, { timeoutMs: 10_000 });
    await pause(1000);
    // The address moves first; for a moment it reaches a standby that is not promoted yet.
    stage.proxy.repoint(stage.pair.standby.port);
    await pause(1000);
    await stage.pair.promoteStandby();
    const promotedAt = Date.now();
    stage.primary = stage.pair.standby;

    await orders.done;
    const lastCommitAt = committed[committed.length - 1].at;
    const allDone = async () => {
      const [tx, lease] = [await queueStates(sql, LEDGER_TX), await queueStates(sql, LEDGER_LEASE)];
      return tx.pending + tx.running + lease.pending + lease.running === 0 ? { tx, lease } : null;
    };
    const states = await waitFor('every task to finish', allDone, { timeoutMs: 50_000, everyMs: 100 });
    // A completion's event is published once its statement answered, which can be after the poll
    // above saw its row done: give the last ones a moment (the assertion below says which is missing).
    const eachWorked = () => workers.every((w) => completions.some((c) => c.at >= promotedAt && c.worker === w.name));
    await waitFor('a completion event from each instance after the promotion', eachWorked, { timeoutMs: 5_000 }).catch(() => undefined);
    const after = completions.filter((c) => c.at >= promotedAt);
    const firstMs = Math.min(...after.map((c) => c.at)) - promotedAt;
    const lastMs = Math.max(...after.map((c) => c.at)) - promotedAt;
    // The backlog the crash caught (claimed, running, or pending on the old primary).
    const backlogMs = Math.max(...after.filter((c) => beforeCrash.has(c.id)).map((c) => c.at), promotedAt) - promotedAt;
    console.log(
      [
        `failover: ${committed.length} orders committed (${orders.refused()} refused during the outage), the crash after ${beforeCrash.size} (${crashAt - producedFrom} ms in);`,
        `crash → promotion ${promotedAt - crashAt} ms (health down: ${down.database.error?.slice(0, 60)});`,
        `promotion → first task completed ${firstMs} ms, → last of those enqueued before the crash ${backlogMs} ms, → last ${lastMs} ms (the last order committed ${lastCommitAt - promotedAt} ms after the promotion);`,
        `completions after it by instance: ${workers.map((w) => `${w.name} ${after.filter((c) => c.worker === w.name).length}`).join(', ')}`,
      ].join('\n'),
    );

    // Every enqueue that committed ran, once done; nothing dead; each order has its task and each task its order.
    expect(states.tx.dead + states.lease.dead).toBe(0);
    const [done] = await sql<{ n: number }>("SELECT count(*)::int AS n FROM pgqueue.task_archive WHERE id = ANY($1::bigint[]) AND state = 'done'", [committed.map((o) => o.id)]);
    expect(done.n).toBe(committed.length);
    const pairs = await orderTaskPairs(sql, 'fo-', [LEDGER_TX, LEDGER_LEASE]);
    expect(pairs).toMatchObject({ orphan_orders: 0, orphan_tasks: 0 });
    expect(pairs.orders).toBe(pairs.tasks);
    expect(pairs.orders).toBeGreaterThanOrEqual(ORDERS);
    const audit = await auditExactlyOnce(sql, LEDGER_TX);
    expect(audit).toMatchObject({ missing: [], duplicated: [], wrong_attempt: [], orphans: 0 });
    expect(audit.effects).toBe(states.tx.done);
    expect(await auditAtLeastOnce(sql, LEDGER_LEASE)).toMatchObject({ never_ran: [], completing_run_missing: [] });

    // No instance restarted: the same three apps, each still working after the promotion.
    for (const w of workers) expect(after.some((c) => c.worker === w.name)).toBe(true);
    expect(backlogMs).toBeLessThan(30_000);

    // LISTEN is back on the new primary, and a new task starts by NOTIFY (polls are 30 s apart).
    await waitFor('every instance listening on the new primary', async () => {
      const rows = await sql("SELECT 1 FROM pg_stat_activity WHERE application_name LIKE 'pg-queue listener%'");
      return rows.length === workers.length && workers.every((w) => w.orchestrator.listening);
    });
    const claimed = Promise.race(workers.map((w) => nextEvents(w.queue.events$, (e) => e.type === 'claimed' && e.queue === LEDGER_LEASE)));
    const t0 = Date.now();
    const id = await producer.queue.enqueue(LEDGER_LEASE, { ping: true });
    const [event] = await claimed;
    const wakeMs = Date.now() - t0;
    console.log(`after the failover: enqueue → start ${wakeMs} ms`);
    expect(event.taskId).toBe(id);
    expect(wakeMs).toBeLessThan(5000);

    await waitFor('health back up on every instance', async () => {
      const hs = await Promise.all(workers.map((w) => w.orchestrator.health(1000)));
      return hs.every((h) => h.database.up && h.listen === 'connected' && h.workers.every((s) => s.alive));
    });
  }, 120_000);
});
