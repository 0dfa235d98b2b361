/**
 * Scenario 11: durable workflows, pg-queue's `@Workflow` beside DBOS Transact, in one child process
 * per run (bench/child.js) on the run's fresh database.
 *
 * - group `drain`: `n` workflows of 3 steps (a step, a database transaction inserting one ledger row,
 *   a step), started one call per workflow with 10 calls in flight while the workers run; timed from
 *   the first start call to the database showing every workflow finished. workflows/s, steps/s, and
 *   pg_stat_statements' statements and server time per workflow. The ledger must hold exactly `n`.
 * - group `wakeup`: `n` workflows that sleep until the same instant (started `leadMs` before it);
 *   each records when its code after the sleep first runs. Delay = that moment − the instant. The
 *   run fails unless every workflow had reached its sleep before the instant.
 */
import { performance } from 'node:perf_hooks';
import type { Client } from 'pg';
import { sleep, waitFor } from './common';
import type { RunResult, RunSpec } from './run-spec';
import type { ServerTotals } from './scale';

export type WorkflowGroup = 'drain' | 'wakeup';

/** What the run reads from pg_stat_statements (statement-stats.ts). */
export interface WorkflowProbe {
  reset(): Promise<void>;
  totals(): Promise<ServerTotals>;
  read(pattern: string): Promise<{ top: { calls: number; query: string }[] }>;
}

export interface WorkflowInput {
  seq: number;
  /** wakeup: the instant to sleep until (epoch ms). */
  at?: number;
}

/** Calls from the workflows' code into the run (module state: one run per process). */
export const hooks = {
  done: (_seq: number) => undefined as void,
  asleep: (_seq: number) => undefined as void,
  resumed: (_seq: number) => undefined as void,
};

export const LEDGER_SQL = 'INSERT INTO bench_wf_ledger (seq, entry) VALUES ($1, $2)';

/** One engine: boots with its workers running, starts workflows, tells how many finished. */
export interface WorkflowEngine {
  describe(): string;
  open(): Promise<void>;
  startDrain(input: WorkflowInput): Promise<void>;
  startSleeper(input: WorkflowInput): Promise<void>;
  /** Workflows of the group finished successfully, per the database. */
  finished(db: Client, group: WorkflowGroup): Promise<number>;
  /** wakeup: workflows parked in the database (null: the engine keeps sleepers in memory). */
  parked(db: Client): Promise<number | null>;
  close(): Promise<void>;
}

export interface WorkflowEngineOptions {
  url: string;
  concurrency: number;
  /** DBOS: the queue's minPollingIntervalMs (undefined: DBOS's default, 1 000 ms). */
  pollMs?: number;
  /**
   * wakeup: how many workflows sleep. DBOS's sleepers are started without a queue, so nothing bounds
   * how many resume at once; pg-queue's sleeper queue gets that many slots for the same freedom
   * (a parked workflow holds none: the slots only bound resumptions running at once).
   */
  sleepers?: number;
}

const now = () => performance.timeOrigin + performance.now();
const percentile = (sorted: number[], p: number) => sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)];

/** Runs `fn` for 0..n-1 with at most `inFlight` calls at once. */
async function startAll(n: number, inFlight: number, fn: (seq: number) => Promise<void>, deadline: number): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next < n) {
      const seq = next++;
      await fn(seq);
      if ((seq & 255) === 0 && Date.now() > deadline) throw new Error(`timed out after ${seq} starts`);
    }
  };
  await Promise.all(Array.from({ length: inFlight }, lane));
}

async function makeEngine(spec: RunSpec): Promise<WorkflowEngine> {
  const opts: WorkflowEngineOptions = { url: spec.url, concurrency: spec.concurrency, pollMs: spec.pollMs, sleepers: spec.group === 'wakeup' ? spec.n : undefined };
  if (spec.lib === 'pg-queue') {
    const { PgQueueWorkflows } = await import('./targets/pg-queue-workflows.js');
    return new PgQueueWorkflows(opts);
  }
  if (spec.lib === 'dbos') {
    const { DbosWorkflows } = await import('./targets/dbos.js');
    return new DbosWorkflows(opts);
  }
  throw new Error(`the workflows scenario has no engine for ${spec.lib}`);
}

export async function runWorkflows(spec: RunSpec, db: Client, probe: WorkflowProbe | null): Promise<RunResult> {
  const group = spec.group as WorkflowGroup;
  const n = spec.n;
  await db.query('CREATE TABLE bench_wf_ledger (seq int NOT NULL, entry text NOT NULL)');
  const engine = await makeEngine(spec);
  await engine.open();
  try {
    const settings = engine.describe();
    await sleep(1000); // startup statements are not part of the run
    return group === 'drain' ? await drain(spec, engine, db, probe, settings) : await wakeup(spec, engine, db, settings);
  } finally {
    await Promise.race([engine.close(), sleep(15_000)]);
  }
}

async function drain(spec: RunSpec, engine: WorkflowEngine, db: Client, probe: WorkflowProbe | null, settings: string): Promise<RunResult> {
  const n = spec.n;
  const seen = new Uint8Array(n);
  let done = 0;
  hooks.done = (seq) => {
    if (!seen[seq]) done++;
    seen[seq] = 1;
  };
  await db.query('CHECKPOINT').catch(() => undefined);
  await probe?.reset();
  const deadline = Date.now() + spec.timeoutMs;
  const t0 = performance.now();
  await startAll(n, 10, (seq) => engine.startDrain({ seq }), deadline);
  const enqueueMs = performance.now() - t0;
  await waitFor(`${n} workflows to return (got ${done})`, () => done >= n, Math.max(1000, deadline - Date.now()), 2);
  await waitFor('the database to show every workflow finished', async () => (await engine.finished(db, 'drain')) >= n, Math.max(1000, deadline - Date.now()), 5);
  const t1 = performance.now();
  const totals = await probe?.totals();
  const top = await probe?.read('%');
  const ledger = Number((await db.query('SELECT count(*) AS n, count(DISTINCT seq) AS d FROM bench_wf_ledger')).rows[0].n);
  if (ledger !== n) throw new Error(`the ledger has ${ledger} rows for ${n} workflows (each transaction step must commit exactly once)`);
  const secs = (t1 - t0) / 1000;
  return {
    ok: true,
    metrics: {
      workflowsPerSec: n / secs,
      stepsPerSec: (3 * n) / secs,
      enqueueMs,
      stmtsPerWorkflow: totals ? totals.calls / n : null,
      serverMsPerWorkflow: totals ? totals.execMs / n : null,
    },
    notes: top ? top.top.map((t) => `${t.calls}× ${t.query.slice(0, 140)}`) : [],
    settings,
  };
}

async function wakeup(spec: RunSpec, engine: WorkflowEngine, db: Client, settings: string): Promise<RunResult> {
  const n = spec.n;
  const leadMs = spec.leadMs ?? 3000;
  const asleep = new Uint8Array(n);
  const resumedAt = new Float64Array(n).fill(-1);
  let asleepCount = 0;
  let resumed = 0;
  let finished = 0;
  let lastAsleepAt = 0;
  hooks.asleep = (seq) => {
    if (asleep[seq]) return;
    asleep[seq] = 1;
    asleepCount++;
    lastAsleepAt = now();
  };
  hooks.resumed = (seq) => {
    if (resumedAt[seq] >= 0) return;
    resumedAt[seq] = now();
    resumed++;
  };
  hooks.done = () => void finished++;
  const at = Math.ceil(now() + leadMs);
  const deadline = Date.now() + spec.timeoutMs;
  await startAll(n, 10, (seq) => engine.startSleeper({ seq, at }), deadline);
  await waitFor(`${n} workflows to reach their sleep (got ${asleepCount})`, () => asleepCount >= n, Math.max(1000, at - now()), 2).catch(() => undefined);
  // pg-queue: each must also be parked in the database (its attempt ended) before the instant.
  let parkedAt = lastAsleepAt;
  for (;;) {
    const parked = await engine.parked(db);
    if (parked === null) break;
    parkedAt = now();
    if (parked >= n || now() >= at) {
      if (parked < n) throw new Error(`only ${parked} of ${n} workflows parked ${leadMs} ms after the first start: raise BENCH_WF_LEAD_MS`);
      break;
    }
    await sleep(5);
  }
  if (asleepCount < n || lastAsleepAt >= at || resumed > 0) {
    throw new Error(`only ${asleepCount} of ${n} workflows were asleep before the instant (${leadMs} ms after the first start): raise BENCH_WF_LEAD_MS`);
  }
  await waitFor(`${n} workflows to resume (got ${resumed})`, () => resumed >= n, Math.max(1000, deadline - Date.now()), 2);
  const delays = Array.from(resumedAt, (t) => t - at).sort((a, b) => a - b);
  await waitFor('every woken workflow to finish', async () => (await engine.finished(db, 'wakeup')) >= n, Math.max(1000, deadline - Date.now()), 10);
  return {
    ok: true,
    metrics: {
      p50: percentile(delays, 50),
      p95: percentile(delays, 95),
      max: delays[delays.length - 1],
      min: delays[0],
      slackMs: at - Math.max(lastAsleepAt, parkedAt),
    },
    notes: [],
    settings,
  };
}
