/**
 * One benchmark run in its own process: one library, one scenario, one fresh database. The parent
 * (bench/run.js) creates and drops the database, passes the spec as argv[2] (JSON) and gets the result
 * back over IPC. Every wait here is bounded; the parent also kills the process at a hard deadline.
 */
import { performance } from 'node:perf_hooks';
import type { Client } from 'pg';
import { checkpoint, chunks, connect, payloads, prefill, sleep, waitFor, type BenchTarget, type Payload, type TargetOptions } from './common';
import { openLimitClients, prepareLimit, runLimit } from './physical-limit';
import type { FlowGroup } from './flow';
import type { RunResult, RunSpec } from './run-spec';
import { StatementStats } from './statement-stats';
import type { PgQueueTarget } from './targets/pg-queue';

async function makeTarget(spec: RunSpec): Promise<BenchTarget> {
  const opts: TargetOptions = { url: spec.url, concurrency: spec.concurrency, mode: spec.mode, preset: spec.preset, metrics: spec.scenario === 'scale' || spec.scenario === 'make-scale' };
  switch (spec.lib) {
    case 'pg-queue': {
      const { PgQueueTarget } = await import('./targets/pg-queue.js');
      return new PgQueueTarget(opts);
    }
    case 'pg-boss': {
      const { PgBossTarget } = await import('./targets/pg-boss.js');
      return new PgBossTarget(opts);
    }
    case 'graphile-worker': {
      const { GraphileWorkerTarget } = await import('./targets/graphile-worker.js');
      return new GraphileWorkerTarget(opts);
    }
    case 'bullmq': {
      const { BullMqTarget } = await import('./targets/bullmq.js');
      return new BullMqTarget(opts);
    }
    case 'bare-pg': {
      const { BarePgTarget } = await import('./targets/bare-pg.js');
      return new BarePgTarget(opts);
    }
    default:
      throw new Error(`no target for ${spec.lib}`);
  }
}

/** Scenario 8 measures pg-queue alone (its target module loads only when pg-queue runs). */
function pgQueueOnly(target: BenchTarget): PgQueueTarget {
  if (!('measureScale' in target)) throw new Error('the scale scenario measures pg-queue only');
  return target as PgQueueTarget;
}

const percentile = (sorted: number[], p: number) => sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)];

/** Starts the worker on a prefilled queue and times it until the database shows every task finished. */
async function timedDrain(spec: RunSpec, target: BenchTarget, db: Client, stats: StatementStats | null): Promise<RunResult> {
  const n = spec.n;
  const seen = new Uint8Array(n);
  let handled = 0;
  let duplicates = 0;
  let firstAt = 0;
  await checkpoint(db);
  await stats?.reset();
  const t0 = performance.now();
  await target.startWorker((p: Payload) => {
    if (handled === 0) firstAt = performance.now();
    handled++;
    if (seen[p.seq]) duplicates++;
    seen[p.seq] = 1;
  });
  const deadline = Date.now() + spec.timeoutMs;
  await waitFor(`${n} handler calls (got ${handled})`, () => handled - duplicates >= n, spec.timeoutMs, 2);
  await waitFor('the database to show every task finished', async () => (await target.unfinished(db)) === 0, Math.max(1000, deadline - Date.now()), 5);
  const t1 = performance.now();
  const st = await stats?.read(target.claimStatementPattern);
  const notes: string[] = [];
  if (duplicates > 0) notes.push(`${duplicates} duplicate handler calls`);
  const failed = (await target.failedAfterHandler?.(db)) ?? 0;
  if (failed > 0) notes.push(`${failed} tasks ended failed by the library although their handler returned`);
  return {
    ok: true,
    metrics: {
      tasksPerSec: (n / (t1 - t0)) * 1000,
      firstTaskMs: firstAt - t0,
      stmtsPerTask: st ? st.calls / n : null,
      claimUsPerTask: st && st.claimCalls > 0 ? (st.claimMs * 1000) / n : null,
      claimMsPerCall: st && st.claimCalls > 0 ? st.claimMs / st.claimCalls : null,
    },
    notes,
  };
}

async function runScenario(spec: RunSpec): Promise<RunResult> {
  if (spec.scenario === 'process-worker') {
    // One of scenario 10's worker processes: no connection of its own beyond the app's.
    const { serveWorker } = await import('./processes.js');
    return serveWorker(spec);
  }
  const db = await connect(spec.url);
  try {
    if (spec.scenario === 'limit') {
      await prepareLimit(db, spec.n);
      await checkpoint(db);
      const clients = await openLimitClients(spec.url, spec.concurrency);
      let t0 = 0;
      let t1 = 0;
      let done = 0;
      try {
        t0 = performance.now();
        done = await Promise.race([
          runLimit(clients, spec.mode ?? 'lease'),
          sleep(spec.timeoutMs).then((): number => {
            throw new Error(`timed out after ${spec.timeoutMs} ms`);
          }),
        ]);
        t1 = performance.now();
      } finally {
        await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
      }
      const left = Number((await db.query(`SELECT count(*) AS n FROM pgqueue.task`)).rows[0].n);
      const archived = Number((await db.query(`SELECT count(*) AS n FROM pgqueue.task_archive`)).rows[0].n);
      if (done !== spec.n || left !== 0 || archived !== spec.n) throw new Error(`limit: completed ${done}, left ${left}, archived ${archived}`);
      return { ok: true, metrics: { tasksPerSec: (spec.n / (t1 - t0)) * 1000 }, notes: [] };
    }

    if (spec.scenario === 'flow') {
      const { runFlow } = await import('./flow.js');
      await checkpoint(db);
      // The claim's server time per call (pg_stat_statements), where the server has it.
      const stats = await StatementStats.open(spec.adminUrl, spec.dbName);
      try {
        const res = await runFlow(spec.url, spec.group as FlowGroup, spec.n, spec.timeoutMs, db, stats);
        return { ok: true, metrics: res.metrics, notes: stats ? [] : ['pg_stat_statements is not available: claim ms per call is n/a'], settings: res.settings };
      } finally {
        await stats?.close();
      }
    }

    if (spec.scenario === 'workflows') {
      const { runWorkflows } = await import('./workflows.js');
      const stats = spec.group === 'drain' ? await StatementStats.open(spec.adminUrl, spec.dbName) : null;
      try {
        return await runWorkflows(spec, db, stats);
      } finally {
        await stats?.close();
      }
    }

    if (spec.scenario === 'processes') {
      const { runProcesses } = await import('./processes.js');
      return await runProcesses(spec, db);
    }

    const target = await makeTarget(spec);
    const stats = ['drain', 'history', 'idle', 'scale'].includes(spec.scenario) ? await StatementStats.open(spec.adminUrl, spec.dbName) : null;
    await target.open();
    try {
      const settings = target.describe();
      switch (spec.scenario) {
        case 'make-history': {
          await target.insertHistory(db, spec.n);
          return { ok: true, metrics: {}, notes: [], settings };
        }
        case 'make-scale': {
          const scaled = pgQueueOnly(target);
          await scaled.insertArchived(db, spec.n);
          await scaled.insertDelayed(db, spec.delayed ?? spec.n);
          return { ok: true, metrics: {}, notes: [], settings };
        }
        case 'scale': {
          const scaled = pgQueueOnly(target);
          const notes = stats ? [] : ['pg_stat_statements is not available: server time and buffers are n/a'];
          await checkpoint(db);
          const metrics = await scaled.measureScale(db, stats, spec.n, Date.now() + spec.timeoutMs);
          return { ok: true, metrics, notes, settings };
        }
        case 'enqueue': {
          await checkpoint(db);
          const t0 = performance.now();
          const deadline = Date.now() + spec.timeoutMs;
          const calls = new Float64Array(spec.n);
          for (let i = 0; i < spec.n; i++) {
            const c0 = performance.now();
            await target.enqueueOne({ seq: i });
            calls[i] = performance.now() - c0;
            if ((i & 255) === 0 && Date.now() > deadline) throw new Error(`timed out after ${i} enqueues`);
          }
          const t1 = performance.now();
          const stored = await target.stored(db);
          if (stored !== spec.n) throw new Error(`expected ${spec.n} tasks stored, found ${stored}`);
          const sorted = [...calls].sort((a, b) => a - b);
          const metrics = { tasksPerSec: (spec.n / (t1 - t0)) * 1000, msPerCall: (t1 - t0) / spec.n, callP50: percentile(sorted, 50), callP99: percentile(sorted, 99) };
          return { ok: true, metrics, notes: [], settings };
        }
        case 'bulk': {
          const parts = chunks(payloads(spec.n), spec.bulkSize ?? 1000);
          await checkpoint(db);
          const t0 = performance.now();
          const deadline = Date.now() + spec.timeoutMs;
          for (const part of parts) {
            await target.enqueueMany(part);
            if (Date.now() > deadline) throw new Error('timed out');
          }
          const t1 = performance.now();
          const stored = await target.stored(db);
          if (stored !== spec.n) throw new Error(`expected ${spec.n} tasks stored, found ${stored}`);
          return { ok: true, metrics: { tasksPerSec: (spec.n / (t1 - t0)) * 1000, msPerCall: (t1 - t0) / parts.length }, notes: [], settings };
        }
        case 'drain':
        case 'history': {
          await prefill(target, db, spec.n, spec.bulkSize ?? 1000);
          const res = await timedDrain(spec, target, db, stats);
          return { ...res, settings };
        }
        case 'latency': {
          const n = spec.n;
          const gap = spec.latencyGapMs ?? 20;
          const sent = new Float64Array(n);
          const started = new Float64Array(n).fill(-1);
          let got = 0;
          await target.startWorker((p: Payload) => {
            if (started[p.seq] < 0) {
              started[p.seq] = performance.now();
              got++;
            }
          });
          await sleep(2000); // let the worker go idle (startup polls, LISTEN established)
          const t0 = performance.now() + 5;
          for (let i = 0; i < n; i++) {
            const wait = t0 + i * gap - performance.now();
            if (wait > 0) await sleep(wait);
            sent[i] = performance.now();
            await target.enqueueOne({ seq: i });
          }
          await waitFor(`${n} handler starts (got ${got})`, () => got >= n, spec.timeoutMs, 5);
          const lat = Array.from(sent, (s, i) => started[i] - s).sort((a, b) => a - b);
          return {
            ok: true,
            metrics: { p50: percentile(lat, 50), p95: percentile(lat, 95), p99: percentile(lat, 99), max: lat[lat.length - 1] },
            notes: [],
            settings,
          };
        }
        case 'idle': {
          if (!stats) return { ok: false, metrics: {}, notes: [], settings, error: 'pg_stat_statements is not available (shared_preload_libraries)' };
          await target.startWorker(() => undefined);
          await sleep(3000); // startup statements are not idle cost
          await stats.reset();
          const t0 = performance.now();
          await sleep(spec.idleMs ?? 20_000);
          const st = await stats.read(target.claimStatementPattern);
          const t1 = performance.now();
          const secs = (t1 - t0) / 1000;
          return {
            ok: true,
            metrics: { stmtsPerSec: st.calls / secs, stmts: st.calls },
            notes: st.top.map((t) => `${t.calls}× ${t.query.slice(0, 110)}`),
            settings,
          };
        }
        default:
          throw new Error(`unknown scenario ${spec.scenario}`);
      }
    } finally {
      await Promise.race([target.close(), sleep(15_000)]);
      await stats?.close();
    }
  } finally {
    await db.end().catch(() => undefined);
  }
}

async function main(): Promise<void> {
  const spec = JSON.parse(process.argv[2]) as RunSpec;
  let result: RunResult;
  try {
    result = await runScenario(spec);
  } catch (err) {
    result = { ok: false, metrics: {}, notes: [], error: (err as Error).stack ?? String(err) };
  }
  if (process.send) process.send(result, () => process.exit(0));
  else {
    console.log(JSON.stringify(result));
    process.exit(0);
  }
}

void main();
