import { killFixtureProcesses, startFixtureProcess } from '../support/fixture-process';
import { startKillingFleet } from '../support/killing-fleet';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { attemptsReport, auditAtLeastOnce, auditExactlyOnce, createLedgerTables, queueStates, settled } from '../support/task-ledger';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

/**
 * Chaos: three worker processes (test/fixtures/chaos-worker.ts) drain 2 000 tasks while one of them,
 * chosen at random, is SIGKILLed about every 300 ms and replaced by a fresh process. Handlers keep
 * the library's defaults (maxAttempts 5, backoff, concurrency, batch sizes); only the lease is short
 * so that a killed worker's tasks come back within the test (1.5 s lease, rescue every 250 ms).
 *
 * The killing lasts CHAOS_MS (or until the drain is over); the survivors then finish. On this 2-core
 * machine every replacement costs about 0.6 s of CPU just to load Nest and Prisma, so three workers
 * killed every 300 ms spend most of the machine on restarts and drain 20-60 tasks/s: killing for
 * the whole drain would take 1-2 minutes per mode. CHAOS_SOAK_MS=<ms> runs a longer soak by hand.
 *
 * End state: every task archived as done (none lost, none dead, none left pending or running);
 * transactional: exactly one effect row per task, from the attempt that completed it; lease mode:
 * the completing attempt's run was recorded (reruns are allowed: at-least-once).
 */
const TASKS = 2000;
const WORKERS = 3;
const KILL_EVERY_MS = 300;
/** Kills that must land during the drain for the run to prove anything. */
const MIN_KILLS = 5;
const CHAOS_MS = Number(process.env.CHAOS_SOAK_MS ?? 12_000);
const LEASE_MS = 1500;
const RESCUE_MS = 250;
/** Handler time per task, beside the effect write: kills land in handlers, not only in claims and commits. */
const WORK_MS = 2;
/** A generous bound for the whole drain on a slow, shared machine. */
const DRAIN_DEADLINE_MS = CHAOS_MS + 90_000;

describe('chaos: worker processes SIGKILLed at random while draining', () => {
  let db: TestDatabase;
  let api: QueueApp;

  beforeAll(async () => {
    db = await createTestDatabase();
    api = await bootQueueApp(db.prisma(), [], { autoStart: false }); // installs the schema, enqueues
    await createLedgerTables(db.sql);
  });
  afterAll(async () => {
    await killFixtureProcesses();
    await api?.close();
    await db?.drop();
  });

  it.each([
    ['transactional', 'chaos.tx'],
    ['lease', 'chaos.lease'],
  ])(
    '%s mode: 2 000 tasks, a worker killed about every 300 ms: none lost, dead or left over',
    async (mode, queue) => {
      await api.queue.enqueueMany(Array.from({ length: TASKS }, (_, n) => ({ queue, payload: { n } })));
      const t0 = Date.now();
      const fleet = startKillingFleet({
        size: WORKERS,
        everyMs: KILL_EVERY_MS,
        spawn: (worker) =>
          startFixtureProcess('chaos-worker', [JSON.stringify({ url: db.url, worker, leaseMs: LEASE_MS, rescueIntervalMs: RESCUE_MS, workMs: WORK_MS })]),
      });
      let atChaosEnd = '';
      try {
        // Kill while the chaos lasts and until MIN_KILLS kills have landed (a loaded machine starts
        // replacements slowly, and only started ones are killed), or until the drain is over; then
        // let the survivors finish.
        await waitFor(
          'the chaos to end',
          async () => (Date.now() - t0 > CHAOS_MS && fleet.kills >= MIN_KILLS) || (await settled(db.sql, queue)),
          { timeoutMs: DRAIN_DEADLINE_MS, everyMs: 250 },
        );
        await fleet.stopKilling();
        atChaosEnd = `${((Date.now() - t0) / 1000).toFixed(1)} s, ${JSON.stringify(await queueStates(db.sql, queue))}`;
        await waitFor(`${queue} to settle`, () => settled(db.sql, queue), { timeoutMs: DRAIN_DEADLINE_MS, everyMs: 250 });
      } finally {
        await fleet.stop();
      }
      const elapsed = Date.now() - t0;

      const states = await queueStates(db.sql, queue);
      const report = await attemptsReport(db.sql, queue);
      const audit = mode === 'transactional' ? await auditExactlyOnce(db.sql, queue) : await auditAtLeastOnce(db.sql, queue);
      console.log(
        `chaos ${mode}: ${TASKS} tasks in ${(elapsed / 1000).toFixed(1)} s, ${fleet.kills} kills, ${fleet.started} processes; ` +
          `killing ended at ${atChaosEnd}; ` +
          `states ${JSON.stringify(states)}; tasks by attempts ${JSON.stringify(report.attempts)} (${report.totalAttempts} attempts); ` +
          `audit ${JSON.stringify(audit)}` +
          (report.dead.length ? `; dead because ${JSON.stringify(report.dead)}` : ''),
      );

      expect(fleet.unexpectedExits).toEqual([]);
      // The kills must have happened during the drain, or the test proved nothing.
      expect(fleet.kills).toBeGreaterThanOrEqual(MIN_KILLS);
      expect(states).toEqual({ pending: 0, running: 0, done: TASKS, dead: 0, cancelled: 0 });
      if (mode === 'transactional') {
        expect(audit).toEqual({ effects: TASKS, missing: [], duplicated: [], wrong_attempt: [], orphans: 0 });
      } else {
        expect(audit).toMatchObject({ never_ran: [], completing_run_missing: [] });
      }
    },
    DRAIN_DEADLINE_MS + 30_000,
  );
});
