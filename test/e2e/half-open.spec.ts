import { PrismaPg } from '@prisma/adapter-pg';
import type { PgQueueModuleOptions, TaskEvent } from '@app/pg-queue';
import { PrismaClient } from '../../src/generated/prisma/client';
import { LEDGER_LEASE, LEDGER_TX, startLedgerWorker, type LedgerWorker } from '../support/ledger-handlers';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { StallProxy } from '../support/stall-proxy';
import { auditAtLeastOnce, auditExactlyOnce, createLedgerTables, queueStates } from '../support/task-ledger';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { pause, waitFor } from '../support/wait-for';

/**
 * A half-open network: worker "stalled" reaches PostgreSQL (its Prisma pool and its LISTEN
 * connection) through a proxy that, mid-drain, stops forwarding while keeping every socket open,
 * then forwards again. Worker "direct" is connected directly and keeps working.
 *
 * Expected: the stalled worker's tasks come back once their leases run out (transactional ones
 * after the server ends the stalled, idle transaction: timeoutMs + 1 s) and the direct worker
 * runs them; when the network heals, the stalled worker's late work is fenced (lease-lost), it
 * completes nothing twice, and it runs new work again.
 */
// Per queue. A task taken over goes back behind the backlog (a rescue makes it due now), so the
// backlog left at the stall must drain within it even on a loaded machine: 200 at 4 x 50 ms.
const TASKS = 200;
const OPTIONS: Partial<PgQueueModuleOptions> = {
  pollIntervalMs: 1000,
  rescueIntervalMs: 250,
  queues: {
    // Few slots and 50 ms handlers: the drain outlasts the start of the stall.
    [LEDGER_TX]: { leaseMs: 1000, timeoutMs: 2000, concurrency: 4 },
    [LEDGER_LEASE]: { leaseMs: 1000, concurrency: 4 },
  },
};
const WORK_MS = 50;
type Sql = TestDatabase['sql'];

/** Who completed which task, and everything the stalled worker said about each task. */
function watch() {
  const completedBy = new Map<string, string[]>();
  const stalledSaid = new Map<string, string[]>();
  const said = new Map<string, string[]>();
  /** Subscribes to worker `name`'s events; before it starts, so that none is missed. */
  const attach = (name: string) => (qa: QueueApp) => {
    qa.queue.events$.subscribe((e: TaskEvent) => {
      said.set(e.taskId, [...(said.get(e.taskId) ?? []), `${name}:${e.type}`]);
      if (e.type === 'completed') completedBy.set(e.taskId, [...(completedBy.get(e.taskId) ?? []), name]);
      if (name === 'stalled') stalledSaid.set(e.taskId, [...(stalledSaid.get(e.taskId) ?? []), e.type]);
    });
  };
  return {
    attach,
    completedBy,
    said,
    completions: (name: string) => [...completedBy.values()].filter((by) => by.includes(name)).length,
    /** The stalled worker's outcome events for `ids` (all it said but 'claimed'), once it said one for each. */
    async stalledOutcomes(ids: string[]): Promise<Record<string, string>> {
      const outcome = (id: string) => (stalledSaid.get(id) ?? []).filter((t) => t !== 'claimed').join(',');
      await waitFor('the stalled worker to report an outcome for every task taken over from it', () => ids.every((id) => outcome(id) !== ''), { timeoutMs: 30_000 });
      return Object.fromEntries(ids.map((id) => [id, outcome(id)]));
    },
  };
}

/** Stalls the proxy at a moment the stalled worker holds running tasks; returns their ids. */
async function stallWhileHolding(proxy: StallProxy, sql: Sql): Promise<string[]> {
  const heldNow = async () => (await sql<{ id: string }>("SELECT id::text FROM pgqueue.task WHERE state = 'running' AND locked_by = 'stalled'")).map((r) => r.id);
  for (let tries = 0; tries < 5; tries++) {
    proxy.stall();
    // A completion the stalled worker sent just before the stall still commits on the server (only
    // its answer is held back): such a task is done, not held. Keep what is still running a moment later.
    const first = await heldNow();
    await pause(300);
    const held = (await heldNow()).filter((id) => first.includes(id));
    if (held.length > 0) return held;
    proxy.resume(); // it was between tasks: try again
  }
  throw new Error('the stalled worker never held a task when the proxy stalled');
}

describe('half-open connection: a worker whose network stalls', () => {
  let db: TestDatabase;
  let api: QueueApp;
  let proxy: StallProxy;
  const prismas: PrismaClient[] = [];
  const workers: LedgerWorker[] = [];

  /** Worker "stalled" through the proxy (pool of `poolSize`), worker "direct" on its own connections. */
  async function startPair(poolSize: number, seen: ReturnType<typeof watch>): Promise<{ stalled: LedgerWorker; direct: LedgerWorker }> {
    const viaProxy = proxy.url(db.url);
    const stalledPrisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: viaProxy, max: poolSize }) });
    prismas.push(stalledPrisma);
    const stalled = await startLedgerWorker('stalled', stalledPrisma, db.url, { ...OPTIONS, databaseUrl: viaProxy }, WORK_MS, seen.attach('stalled'));
    workers.push(stalled);
    const direct = await startLedgerWorker('direct', db.prisma(20), db.url, { ...OPTIONS, databaseUrl: db.url }, WORK_MS, seen.attach('direct'));
    workers.push(direct);
    return { stalled, direct };
  }

  async function stopWorker(w: LedgerWorker): Promise<void> {
    workers.splice(workers.indexOf(w), 1);
    await w.close();
  }

  beforeEach(async () => {
    db = await createTestDatabase();
    api = await bootQueueApp(db.prisma(), [], { autoStart: false });
    await createLedgerTables(db.sql);
    proxy = new StallProxy(Number(new URL(db.url).port));
    await proxy.start();
  });
  afterEach(async () => {
    proxy.resume(); // a failed test may have left it stalled: let the worker finish its close
    for (const w of workers.splice(0)) await w.close();
    await Promise.all(prismas.splice(0).map((p) => p.$disconnect()));
    await proxy.close();
    await api.close();
    await db.drop();
  });

  it('10 s cut off: fenced meanwhile, its tasks taken over by the direct worker; then it works again; nothing lost or done twice', async () => {
    const STALL_MS = 10_000;
    for (const queue of [LEDGER_TX, LEDGER_LEASE]) {
      await api.queue.enqueueMany(Array.from({ length: TASKS }, (_, n) => ({ queue, payload: { n } })));
    }
    const seen = watch();
    const { direct } = await startPair(20, seen);

    // Mid-drain, while the stalled worker holds tasks: cut it off.
    await waitFor('the stalled worker to be under way', () => seen.completions('stalled') >= 20, { timeoutMs: 60_000, everyMs: 20 });
    const heldAtStall = await stallWhileHolding(proxy, db.sql);
    const stalledAt = Date.now();
    const directBefore = seen.completions('direct');

    // While it is cut off: the direct worker keeps working and takes over what it held.
    const takenOver = () => heldAtStall.filter((id) => seen.completedBy.get(id)?.includes('direct'));
    await waitFor('the direct worker to take over a task the stalled one held', () => takenOver().length > 0, { timeoutMs: STALL_MS - 1000 });
    expect(seen.completions('direct')).toBeGreaterThan(directBefore);
    expect(Date.now() - stalledAt).toBeLessThan(STALL_MS); // all of that happened during the stall
    await pause(stalledAt + STALL_MS - Date.now()); // the stall lasts 10 s in all
    proxy.resume();

    // The backlog drains.
    const drained = async (total: number) => {
      const tx = await queueStates(db.sql, LEDGER_TX);
      const lease = await queueStates(db.sql, LEDGER_LEASE);
      return tx.done + tx.dead === total && lease.done + lease.dead === total;
    };
    await waitFor('the drain to finish', () => drained(TASKS), { timeoutMs: 60_000, everyMs: 250 });
    // The stalled worker, reconnected, learns that it lost the leases of the tasks taken over (its
    // lock or completion is fenced) and never reports one of them as its own success. (A failure it
    // could not record on a dead connection is still reported as 'failed': the outcome is unknown.)
    const outcomes = await seen.stalledOutcomes(takenOver());
    console.log(`half-open: ${heldAtStall.length} tasks held at the stall; what the stalled worker said about those taken over: ${JSON.stringify(outcomes)}`);
    expect(Object.values(outcomes)).toContain('lease-lost');
    expect(Object.entries(outcomes).filter(([, said]) => said.includes('completed'))).toEqual([]);

    // Healed, it works again: alone now, it runs new tasks of both queues.
    await stopWorker(direct);
    const fresh: string[] = [];
    for (const queue of [LEDGER_TX, LEDGER_LEASE]) fresh.push(...(await api.queue.enqueueMany(Array.from({ length: 20 }, (_, n) => ({ queue, payload: { fresh: n } })))));
    await waitFor('the stalled worker to run new tasks', () => fresh.every((id) => seen.completedBy.get(id)?.includes('stalled')), { timeoutMs: 60_000 });

    // Every task completed exactly once, by one worker or the other; effects exactly once.
    const total = TASKS + 20;
    expect([...seen.completedBy].filter(([, by]) => by.length > 1)).toEqual([]);
    // Which task no worker reported as completed, with what each said of it (a failure's diagnosis).
    const archived = await db.sql<{ id: string; queue: string; state: string; attempt: number; finished_at: Date }>('SELECT id::text, queue, state, attempt, finished_at FROM pgqueue.task_archive');
    const unreported = archived.filter((r) => !seen.completedBy.has(r.id));
    expect(unreported.map((row) => ({ ...row, said: seen.said.get(row.id) }))).toEqual([]);
    expect(seen.completedBy.size).toBe(2 * total);
    for (const queue of [LEDGER_TX, LEDGER_LEASE]) {
      expect({ queue, ...(await queueStates(db.sql, queue)) }).toEqual({ queue, pending: 0, running: 0, done: total, dead: 0, cancelled: 0 });
    }
    expect(await auditExactlyOnce(db.sql, LEDGER_TX)).toEqual({ effects: total, missing: [], duplicated: [], wrong_attempt: [], orphans: 0 });
    expect(await auditAtLeastOnce(db.sql, LEDGER_LEASE)).toMatchObject({ never_ran: [], completing_run_missing: [] });
  }, 180_000);
});
