import { fork, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Client } from 'pg';
import { QUEUE, checkpoint, prefill, waitFor, type Payload } from './common';
import { CORES, backendMs, machineCpu, serverCpu } from './cpu';
import { PgQueueTarget } from './targets/pg-queue';
import type { RunResult, RunSpec } from './run-spec';

/**
 * Scenario 10: one backlog drained by 1, 2 or 4 worker processes (pg-queue, either mode, the drain
 * scenario's app at concurrency 10 per process); and a limited queue (globalConcurrency 20, lease
 * mode, concurrency 20 per process) drained by 1, 2 or 4: more processes must not mean less. This process (the coordinator) fills the queue,
 * then forks the workers through bench/child.js (spec.scenario 'process-worker'). Each boots its
 * Nest app with autoStart off and opens its pool; only when every one is ready does the clock start:
 *
 *   coordinator                          worker (×P)
 *   prefill, fork ─────────────────────▶ boot app (autoStart: false) ── ready ─▶
 *   all ready: warm ───────────────────▶ open the pool's connections ─ warm ──▶
 *   all warm: CHECKPOINT, CPU readings,
 *   t0, start ─────────────────────────▶ cpuUsage(), WorkerOrchestrator.start()
 *                ◀── progress (handled count, every 10 ms while it changes)
 *   Σ handled = n, then the task table empty: t1, CPU readings, stop ─▶ cpuUsage() since start,
 *                ◀── result (handled, duplicates, user and system ms); close, exit
 *
 * Progress comes over IPC so that the coordinator's polling does not load the server; it counts
 * rows only once the handlers have seen every task.
 */

type ToWorker = { type: 'warm' } | { type: 'start' } | { type: 'stop' };
type FromWorker = { type: 'ready' } | { type: 'warm' } | { type: 'progress'; handled: number } | RunResult;

const BOOT_MS = 120_000;

export async function runProcesses(spec: RunSpec, db: Client): Promise<RunResult> {
  const n = spec.n;
  const count = spec.processes ?? 1;
  const deadline = Date.now() + spec.timeoutMs;
  const filler = new PgQueueTarget({ url: spec.url, concurrency: spec.concurrency, mode: spec.mode, globalConcurrency: spec.globalConcurrency });
  await filler.open();
  try {
    await prefill(filler, db, n, spec.bulkSize ?? 1000);
  } finally {
    await filler.close();
  }

  const workers: Worker[] = [];
  try {
    for (let i = 0; i < count; i++) workers.push(new Worker({ ...spec, scenario: 'process-worker' }));
    await Promise.all(workers.map((w) => w.next('ready', BOOT_MS)));
    await Promise.all(workers.map((w) => w.send({ type: 'warm' }).next('warm', BOOT_MS)));

    await checkpoint(db);
    const pid = (await db.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    const pg0 = serverCpu(pid, spec.dbName);
    const m0 = machineCpu();
    const self0 = process.cpuUsage();
    const t0 = performance.now();
    for (const w of workers) w.send({ type: 'start' });
    const handled = () => workers.reduce((a, w) => a + w.handled, 0);
    await waitFor(`${n} handler calls (got ${handled()})`, () => handled() >= n || workers.some((w) => w.failed), deadline - Date.now(), 2);
    const failed = workers.find((w) => w.failed);
    if (failed) throw new Error(`a worker failed: ${failed.failed}`);
    await waitFor('the task table to be empty', async () => (await unfinished(db)) === 0, Math.max(1000, deadline - Date.now()), 5);
    const t1 = performance.now();
    const self = process.cpuUsage(self0);
    const m1 = machineCpu();
    const pg1 = serverCpu(pid, spec.dbName);

    const results = await Promise.all(workers.map((w) => w.send({ type: 'stop' }).result(30_000)));
    const bad = results.find((r) => !r.ok);
    if (bad) throw new Error(`a worker failed: ${bad.error}`);
    const sum = (k: string) => results.reduce((a, r) => a + (r.metrics[k] ?? 0), 0);
    const archived = await archivedDone(db);
    const left = await unfinished(db);
    // 0 lost, none left: each of the n tasks archived as done once, the hot table empty.
    if (archived.rows !== n || archived.seqs !== n || left !== 0) {
      throw new Error(`expected ${n} tasks archived as done and none left: ${archived.rows} archive rows (${archived.seqs} distinct tasks), ${left} left`);
    }
    const wallMs = t1 - t0;
    const nodeMs = sum('userMs') + sum('systemMs');
    const pgMs = pg0 && pg1 ? pg1.totalMs - pg0.totalMs : null;
    const duplicates = sum('handled') - n; // handler calls beyond one per task, within and across processes
    return {
      ok: true,
      metrics: {
        tasksPerSec: (n / wallMs) * 1000,
        pgMsPerTask: pgMs === null ? null : pgMs / n,
        pgBackendMsPerTask: pg0 && pg1 ? backendMs(pg0, pg1) / n : null,
        nodeMsPerTask: nodeMs / n,
        // Average cores busy over the wall time. `other` is what remains of the machine's cores
        // after Postgres, the workers, interrupts and idle: anything else running on the machine,
        // this coordinator (coordinatorCores) and the hypervisor's steal (stealCores) included.
        pgCores: pgMs === null ? null : pgMs / wallMs,
        nodeCores: nodeMs / wallMs,
        irqCores: (m1.irqMs - m0.irqMs) / wallMs,
        idleCores: (m1.idleMs - m0.idleMs) / wallMs,
        otherCores: pgMs === null ? null : CORES - (pgMs + nodeMs + (m1.irqMs - m0.irqMs) + (m1.idleMs - m0.idleMs)) / wallMs,
        coordinatorCores: (self.user + self.system) / 1000 / wallMs,
        stealCores: (m1.stealMs - m0.stealMs) / wallMs,
        duplicates,
      },
      notes: duplicates > 0 ? [`${duplicates} duplicate handler calls`] : pg0 ? [] : ['the server is not on this machine: Postgres CPU is n/a'],
      settings: results[0].settings, // each process's, as in the drain scenario
    };
  } finally {
    for (const w of workers) w.kill();
  }
}

/** The coordinator's handle on one worker process. */
class Worker {
  handled = 0;
  failed: string | null = null;
  private readonly child: ChildProcess;
  private readonly waiting = new Map<string, (m: FromWorker) => void>();

  constructor(spec: RunSpec) {
    this.child = fork(path.join(__dirname, '..', 'child.js'), [JSON.stringify(spec)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.child.on('message', (m: FromWorker) => {
      if ('ok' in m) {
        if (!m.ok) this.failed = m.error ?? 'failed';
        this.waiting.get('result')?.(m);
      } else if (m.type === 'progress') this.handled = m.handled;
      else this.waiting.get(m.type)?.(m);
    });
    this.child.on('exit', (code, signal) => {
      this.failed ??= `exited (${signal ?? code})`;
    });
  }

  send(m: ToWorker): this {
    this.child.send(m);
    return this;
  }

  next(type: 'ready' | 'warm' | 'result', timeoutMs: number): Promise<FromWorker> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`a worker was not ${type} within ${timeoutMs} ms${this.failed ? `: ${this.failed}` : ''}`)), timeoutMs);
      this.child.once('exit', () => reject(new Error(`a worker exited before ${type}: ${this.failed}`)));
      this.waiting.set(type, (m) => {
        clearTimeout(timer);
        resolve(m);
      });
    });
  }

  result(timeoutMs: number): Promise<RunResult> {
    return this.next('result', timeoutMs) as Promise<RunResult>;
  }

  kill(): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
  }
}

/** One worker process: the drain scenario's pg-queue app, driven by the coordinator's messages. */
export async function serveWorker(spec: RunSpec): Promise<RunResult> {
  // The coordinator gone (killed at its hard deadline) means this run is over too.
  process.on('disconnect', () => process.exit(1));
  const send = (m: FromWorker) => process.send?.(m);
  const target = new PgQueueTarget({ url: spec.url, concurrency: spec.concurrency, mode: spec.mode, globalConcurrency: spec.globalConcurrency });
  await target.open();
  try {
    const seen = new Uint8Array(spec.n);
    let handled = 0;
    let duplicates = 0;
    const onTask = (p: Payload) => {
      handled++;
      if (seen[p.seq]) duplicates++;
      seen[p.seq] = 1;
    };
    let cpu0 = process.cpuUsage();
    let sent = 0;
    const ticker = setInterval(() => {
      if (handled !== sent) send({ type: 'progress', handled: (sent = handled) });
    }, 10);
    const stopped = new Promise<NodeJS.CpuUsage>((resolve, reject) => {
      process.on('message', (m: ToWorker) => {
        if (m.type === 'warm') target.warmPool().then(() => send({ type: 'warm' }), reject);
        else if (m.type === 'start') {
          cpu0 = process.cpuUsage();
          target.startWorker(onTask).catch(reject);
        } else if (m.type === 'stop') resolve(process.cpuUsage(cpu0));
      });
    });
    send({ type: 'ready' });
    const cpu = await stopped.finally(() => clearInterval(ticker));
    return { ok: true, metrics: { handled, duplicates, userMs: cpu.user / 1000, systemMs: cpu.system / 1000 }, notes: [], settings: target.describe() };
  } finally {
    await target.close();
  }
}

async function unfinished(db: Client): Promise<number> {
  return (await db.query(`SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = $1`, [QUEUE])).rows[0].n;
}

async function archivedDone(db: Client): Promise<{ rows: number; seqs: number }> {
  const r = await db.query(
    `SELECT count(*)::int AS rows, count(DISTINCT payload->>'seq')::int AS seqs FROM pgqueue.task_archive WHERE queue = $1 AND state = 'done'`,
    [QUEUE],
  );
  return r.rows[0];
}
