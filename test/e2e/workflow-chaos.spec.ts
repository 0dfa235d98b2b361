/**
 * Workflow chaos (issue 24, proofs): WORKFLOWS workflows of wfx.chaos (test/fixtures/workflow-worker.ts:
 * three outside calls recorded with their step keys, two transactions writing ledger rows, a sleep,
 * a signal wait) run over three worker processes, one of them SIGKILLed (a kill tried about every
 * 300 ms) and replaced (test/support/killing-fleet.ts), and PostgreSQL (a cluster of the spec's
 * own) restarted once mid-run. Only processes that ran a workflow call at least MIN_WORKING_MS ago
 * are killed ("WORKING"): on this 2-core machine a replacement takes seconds to start. Killing
 * processes as soon as they are READY, as chaos.spec.ts does, landed every kill in a start-up,
 * before any workflow call; killing them as soon as they were WORKING let each work a few hundred
 * ms, so that 0 to 10 of 300 workflows finished while the killing lasted (CI runs of 2026-11-27).
 * A third of the signals are sent before any worker runs, the rest during the chaos.
 *
 * End state: every workflow done; each transaction step's ledger row exactly once; every run of an
 * outside call (at least once) used the one key `${id}:${step}`; each workflow's one signal consumed
 * once, and its payload is what the workflow returned.
 */
import { killFixtureProcesses, startFixtureProcess } from '../support/fixture-process';
import { startKillingFleet } from '../support/killing-fleet';
import { startOwnCluster, type OwnCluster } from '../support/own-cluster';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { queueStates } from '../support/task-ledger';
import { pause, waitFor } from '../support/wait-for';
import { createWorkflowLedger } from '../support/workflow-ledger';

const WORKFLOWS = Number(process.env.WF_CHAOS_WORKFLOWS ?? 300);
const WORKERS = 3;
const KILL_EVERY_MS = 300;
const MIN_KILLS = 5;
/** How long a process has been running workflows before it may be killed: work gets done between kills. */
const MIN_WORKING_MS = 2000;
const CHAOS_MS = Number(process.env.CHAOS_SOAK_MS ?? 15_000);
const LEASE_MS = 1500;
const RESCUE_MS = 250;
/** The killing stops by then even if fewer workflows finished under it (the run says how many did). */
const CHAOS_MAX_MS = CHAOS_MS + 45_000;
const DEADLINE_MS = CHAOS_MAX_MS + 90_000;
const QUEUE = 'wfx.chaos';
/** How long after the restart a start-up that met it may take to fail and exit (a loaded 2-core machine). */
const RESTART_SLACK_MS = 10_000;
/** What a start-up says when the restart refused, dropped or turned away its connection (startup.errors.ts). */
const RESTART_MET = /^STARTUP FAILED .*(cannot reach PostgreSQL|PostgreSQL closed the connection|the database system is (starting up|shutting down|not yet accepting connections)|terminating connection due to administrator command)/m;

/** No workflow of the queue left to run: none pending, running or parked ('waiting'). */
async function settled(sql: OwnCluster['sql'], queue: string): Promise<boolean> {
  const [r] = await sql<{ n: number }>("SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = $1 AND state IN ('pending', 'running', 'waiting')", [queue]);
  return r.n === 0;
}

describe('workflow chaos: worker processes SIGKILLed and a PostgreSQL restart', () => {
  let cluster: OwnCluster;
  let api: QueueApp;

  beforeAll(async () => {
    cluster = await startOwnCluster('wfchaos');
    api = await bootQueueApp(cluster.prisma(), [], { autoStart: false }); // installs the schema, enqueues, signals
    await createWorkflowLedger(cluster.sql);
  }, 120_000);

  afterAll(async () => {
    await killFixtureProcesses();
    await api?.close();
    await cluster?.stop();
  });

  /** A signal, retried while the database restarts (sent one at a time, so a retry follows a failure to send). */
  async function signal(id: string): Promise<void> {
    for (let tries = 0; ; tries++) {
      try {
        await api.queue.signal(id, 'go', Number(id));
        return;
      } catch (err) {
        if (tries > 100) throw err;
        await pause(200);
      }
    }
  }

  it(`${WORKFLOWS} workflows, a worker killed about every 300 ms, one restart: each done, effects once, keys shared, signals once`, async () => {
    const ids = await api.queue.enqueueMany(
      Array.from({ length: WORKFLOWS }, (_, i) => ({ queue: QUEUE, payload: { sleepMs: 100 + (i % 10) * 50 }, options: { maxAttempts: 100 } })),
    );
    const early = ids.filter((_, i) => i % 3 === 0);
    const later = ids.filter((_, i) => i % 3 !== 0);
    for (const id of early) await signal(id);

    const t0 = Date.now();
    let restartBegan = Infinity;
    let restartedAt = -1;
    const fleet = startKillingFleet({
      size: WORKERS,
      everyMs: KILL_EVERY_MS,
      readyMarker: 'WORKING', // kills land mid-workflow, not on a process still starting (see the file's comment)
      minReadyMs: MIN_WORKING_MS,
      spawn: (worker) => startFixtureProcess('workflow-worker', [JSON.stringify({ url: cluster.url, worker, leaseMs: LEASE_MS, rescueIntervalMs: RESCUE_MS })]),
      // A replacement whose start-up meets the restart fails it, as documented (one line, exit 1),
      // and is replaced like any other; one that fails so at any other time is a bug.
      expectedExit: (output, at) =>
        RESTART_MET.test(output) && at >= restartBegan && (restartedAt < 0 || at <= t0 + restartedAt + RESTART_SLACK_MS),
    });
    const trace: string[] = [];
    const tracer = setInterval(() => {
      void cluster
        .sql<{ state: string; n: number }>("SELECT state, count(*)::int AS n FROM pgqueue.task WHERE queue = $1 GROUP BY 1 ORDER BY 1", [QUEUE])
        .then((rows) => trace.push(`${((Date.now() - t0) / 1000).toFixed(0)}s k${fleet.kills} ${rows.map((r) => `${r.state[0]}${r.n}`).join(' ')}`), () => undefined);
    }, 2000);
    try {
      // The signals spread over the first part of the chaos, the restart in the middle of it.
      const every = (CHAOS_MS * 0.6) / later.length;
      for (let i = 0; i < later.length; i++) {
        if (restartedAt < 0 && i === Math.floor(later.length / 2)) {
          restartBegan = Date.now();
          await cluster.restart();
          restartedAt = Date.now() - t0;
        }
        await signal(later[i]);
        await pause(every);
      }
      // Kill until a third of the workflows finished under the killing (replacements boot slowly
      // on a 2-core machine: for the first seconds nothing runs), at least CHAOS_MS and MIN_KILLS,
      // at most CHAOS_MAX_MS; then let the survivors finish.
      const doneNow = async () => (await queueStates(cluster.sql, QUEUE)).done;
      await waitFor(
        'the chaos to end',
        async () => Date.now() - t0 > CHAOS_MAX_MS || (Date.now() - t0 > CHAOS_MS && fleet.kills >= MIN_KILLS && (await doneNow()) >= WORKFLOWS / 3) || (await settled(cluster.sql, QUEUE)),
        { timeoutMs: DEADLINE_MS, everyMs: 250 },
      );
      await fleet.stopKilling();
      const atChaosEnd = `${((Date.now() - t0) / 1000).toFixed(1)} s, ${JSON.stringify(await queueStates(cluster.sql, QUEUE))}`;
      await waitFor(`${QUEUE} to settle`, () => settled(cluster.sql, QUEUE), { timeoutMs: DEADLINE_MS, everyMs: 250 });
      console.log(
        `workflow chaos: ${WORKFLOWS} workflows in ${((Date.now() - t0) / 1000).toFixed(1)} s, ${fleet.kills} kills, ${fleet.started} processes, ` +
          `restart at ${(restartedAt / 1000).toFixed(1)} s (${fleet.expectedExits.length} start-ups failed on it); killing ended at ${atChaosEnd}`,
      );
    } finally {
      clearInterval(tracer);
      console.log(trace.join(' | '));
      await fleet.stop();
    }

    expect(fleet.unexpectedExits).toEqual([]);
    expect(fleet.kills).toBeGreaterThanOrEqual(MIN_KILLS);
    expect(await queueStates(cluster.sql, QUEUE)).toEqual({ pending: 0, running: 0, done: WORKFLOWS, dead: 0, cancelled: 0 });

    // Each transaction step's row exactly once.
    const ledger = await cluster.sql<{ step: string; once: number; other: number }>(
      `SELECT step, count(*) FILTER (WHERE n = 1)::int AS once, count(*) FILTER (WHERE n <> 1)::int AS other
       FROM (SELECT workflow, step, count(*) AS n FROM wf_ledger GROUP BY 1, 2) x GROUP BY step ORDER BY step`,
    );
    expect(ledger).toEqual([
      { step: 'tx-1', once: WORKFLOWS, other: 0 },
      { step: 'tx-2', once: WORKFLOWS, other: 0 },
    ]);

    // Every outside call ran, every run of it with the one key of its workflow and step.
    const keyed = await cluster.sql<{ step: string; workflows: number; runs: number; wrong_key: number }>(
      `SELECT step, count(DISTINCT workflow)::int AS workflows, count(*)::int AS runs,
              count(*) FILTER (WHERE key <> workflow || ':' || step)::int AS wrong_key
       FROM wf_call GROUP BY step ORDER BY step`,
    );
    console.log(`outside calls: ${JSON.stringify(keyed)}`);
    expect(keyed.map(({ step, workflows, wrong_key }) => ({ step, workflows, wrong_key }))).toEqual(
      ['call-1', 'call-2', 'call-3'].map((step) => ({ step, workflows: WORKFLOWS, wrong_key: 0 })),
    );

    // One signal per workflow, consumed once (by its wait), and the payload the workflow returned.
    const signals = await cluster.sql<{ bad: number; consumed: number }>(
      `SELECT count(*) FILTER (WHERE n <> 1 OR consumed <> 1 OR NOT returned)::int AS bad, sum(consumed)::int AS consumed
       FROM (SELECT g.task_id, count(*) AS n, count(g.consumed_seq) AS consumed,
                    bool_and((a.result -> 'go')::bigint = g.task_id) AS returned
             FROM pgqueue.workflow_signal g JOIN pgqueue.task_archive a ON a.id = g.task_id
             GROUP BY g.task_id) x`,
    );
    expect(signals).toEqual([{ bad: 0, consumed: WORKFLOWS }]);
  }, CHAOS_MS + 2 * DEADLINE_MS);
});
