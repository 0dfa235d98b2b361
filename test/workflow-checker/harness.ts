/**
 * The generated-program workflow checker, part 3: a trial runs one generated program twice at once,
 * as INSTANCES workflows in each of two queue schemas: `clean` (one instance, nothing goes wrong)
 * and `faulty` (two instances in this process and one worker process, on a PostgreSQL cluster of
 * its own, their database connections through a StallProxy, under the trial's fault plan:
 * connections dropped, an instance shut down mid-call and replaced, the worker process SIGKILLed
 * while it runs an attempt and replaced, the cluster restarted, a step slow past the handler's
 * timeout, signals sent early, late, twice or inside a long business transaction, a cancel). The
 * outside world's record (interpreter.ts) is in the clean run's database, which no fault touches. Both runs are then held against the model (programs.ts `expect`): the
 * same state and result, each transaction's row once, each follow-up and child once, each signal
 * consumed once, no attempt counted that neither the program nor an injected timeout explains, no
 * failure whose error the program did not throw, no attempt `running` past its timeout, nothing
 * left `running` or `waiting` at the end, and a cancel that always ends the workflow.
 */
import fc from 'fast-check';
import { Logger } from '@nestjs/common';
import { SignalTargetError, type TaskInfo } from '@app/pg-queue';
import { PrismaClient } from '../../src/generated/prisma/client';
import { startFixtureProcess, type FixtureProcess } from '../support/fixture-process';
import { terminablePrisma, type OwnCluster } from '../support/own-cluster';
import { ownerOf } from '../support/leftovers';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { StallProxy } from '../support/stall-proxy';
import type { TestDatabase } from '../support/test-database';
import { pause } from '../support/wait-for';
import { ATTEMPT_TIMEOUT_MS, CheckedPrograms, WORKFLOW_QUEUE, outside, type ProgramInput } from './interpreter';
import { callsOf, expect as expected, payloadOf, show, signalsOf, type Expected, type Program } from './programs';

/** Workflows per run of a trial. */
const INSTANCES = 3;
/** A trial's workflows end within this, or the trial fails ("nothing stays running or waiting"). */
const TRIAL_DEADLINE_MS = 45_000;
/** An attempt may be seen `running` this much past its handler's timeout (polling, the rescue pass). */
const RUNNING_SLACK_MS = 2500;

export type SignalTiming = 'early' | 'late' | 'twice' | 'in-long-tx';
export type Fault =
  | { at: number; kind: 'drop'; ms: number }
  | { at: number; kind: 'shutdown' }
  | { at: number; kind: 'kill' }
  | { at: number; kind: 'restart' }
  | { at: number; kind: 'slow'; step: number }
  | { at: number; kind: 'cancel'; instance: number };

export interface FaultPlan {
  /** How each signal is sent in the faulty run (cycled over the program's signals). */
  signals: SignalTiming[];
  faults: Fault[];
}

const at = fc.integer({ min: 0, max: 2500 });
/** CHECK_FAULTS (e.g. `shutdown,slow`): only these kinds of fault, to look at one. */
const KINDS = ['drop', 'shutdown', 'kill', 'restart', 'slow', 'cancel'] as const;
const kinds = new Set((process.env.CHECK_FAULTS ?? KINDS.join(',')).split(','));
const faultArbs: fc.Arbitrary<Fault>[] = [
  fc.record({ at, kind: fc.constant('drop' as const), ms: fc.integer({ min: 50, max: 600 }) }),
  fc.record({ at, kind: fc.constant('shutdown' as const) }),
  fc.record({ at, kind: fc.constant('kill' as const) }),
  fc.record({ at, kind: fc.constant('restart' as const) }),
  fc.record({ at, kind: fc.constant('slow' as const), step: fc.nat(20) }),
  fc.record({ at, kind: fc.constant('cancel' as const), instance: fc.nat(INSTANCES - 1) }),
];
export const faultPlanArb: fc.Arbitrary<FaultPlan> = fc.record({
  signals: fc.array(fc.constantFrom<SignalTiming>('early', 'late', 'twice', 'in-long-tx'), { minLength: 1, maxLength: 6 }),
  faults: fc.array(fc.oneof(...faultArbs.filter((_, i) => kinds.has(KINDS[i]))), { minLength: 1, maxLength: 4 }),
});

interface Run {
  label: 'clean' | 'faulty';
  ids: string[];
  /** The faulty run's cancel, if its plan has one: the instance and what cancel() answered. */
  cancelled: Map<string, string>;
}

/** The apps of the two runs; kept across trials, the faulty run's replaced as faults shut them down. */
export class CheckerFleet {
  private cleanWorker!: QueueApp;
  private faultyWorkers: QueueApp[] = [];
  /** The faulty run's worker process (kill faults end it; a replacement starts at once). */
  private process: FixtureProcess | null = null;
  private processWorker = '';
  /** The restart under way, or the last one (the next waits for it). */
  private restarting: Promise<void> = Promise.resolve();
  private cleanApi!: QueueApp;
  private faultyApi!: QueueApp;
  private proxy!: StallProxy;
  private booted = 0;
  private readonly clients: PrismaClient[] = [];
  /** The app's own clients, for the business transactions that send signals, by run. */
  private business!: { clean: PrismaClient; faulty: PrismaClient };
  private closed = false;
  /** Drops under way (they may overlap). */
  private dropping = 0;
  stats = { trials: 0, faults: 0, kills: 0, rescued: 0, workflows: 0 };

  constructor(
    /** The clean run's database, and the outside world's. */
    private readonly db: TestDatabase,
    /** The faulty run's cluster (a restart fault restarts it). */
    private readonly faultyDb: OwnCluster,
  ) {}

  private dbOf(label: 'clean' | 'faulty'): { sql: TestDatabase['sql'] } {
    return label === 'clean' ? this.db : this.faultyDb;
  }

  async start(): Promise<void> {
    for (const db of [this.db, this.faultyDb]) await db.sql('CREATE TABLE IF NOT EXISTS chk_ledger (run text NOT NULL, workflow text NOT NULL, entry text NOT NULL)');
    await this.db.sql(`CREATE TABLE IF NOT EXISTS chk_outside (id bigint GENERATED ALWAYS AS IDENTITY, run text NOT NULL, workflow text NOT NULL, step text NOT NULL, key text NOT NULL);
      CREATE INDEX IF NOT EXISTS chk_outside_idx ON chk_outside (run, workflow, step)`);
    outside.use(this.db.url);
    this.proxy = new StallProxy(this.faultyDb.port);
    await this.proxy.start();
    this.business = { clean: this.db.prisma(6), faulty: this.faultyDb.prisma(6) };
    this.cleanWorker = await this.worker('clean');
    this.cleanApi = await bootQueueApp(this.db.prisma(4), [], { schema: 'chk_clean', autoStart: false });
    this.faultyApi = await bootQueueApp(this.faultyDb.prisma(6), [], { schema: 'chk_fault', autoStart: false });
    for (let i = 0; i < 2; i++) this.faultyWorkers.push(await this.worker('faulty'));
    if (kinds.has('kill')) {
      this.process = this.workerProcess();
      await this.process.line('READY', 90_000); // a worker process takes 5-9 s to start here
    }
  }

  private workerProcess(): FixtureProcess {
    this.processWorker = `process-${++this.booted}`;
    const config = { url: this.proxy.url(this.faultyDb.url), direct: this.db.url, worker: this.processWorker };
    return startFixtureProcess('checker-worker', [JSON.stringify(config)]);
  }

  /** Waits (up to `ms`) until the worker process runs an attempt of the faulty run: a kill then interrupts it. */
  private async processBusy(ms: number): Promise<void> {
    const until = Date.now() + ms;
    while (Date.now() < until) {
      const busy = await this.faultyDb.sql("SELECT 1 FROM chk_fault.task WHERE state = 'running' AND locked_by = $1 LIMIT 1", [this.processWorker]).catch(() => []);
      if (busy.length > 0) return;
      await pause(20);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.proxy.admit();
    await this.process?.kill();
    for (const a of [this.cleanWorker, ...this.faultyWorkers, this.cleanApi, this.faultyApi]) await a?.close().catch(() => undefined);
    await outside.close();
    await Promise.all(this.clients.map((c) => c.$disconnect().catch(() => undefined)));
    await this.proxy?.close();
  }

  private async worker(label: 'clean' | 'faulty'): Promise<QueueApp> {
    const viaProxy = label === 'faulty';
    for (let tries = 0; ; tries++) {
      if (this.closed) throw new Error('the checker is closing');
      try {
        const url = viaProxy ? this.proxy.url(this.faultyDb.url) : this.db.url;
        const prisma = viaProxy ? this.prismaAt(url) : this.db.prisma(12);
        const app = await bootQueueApp(prisma, [CheckedPrograms], {
          schema: label === 'clean' ? 'chk_clean' : 'chk_fault',
          workerId: `${label}-${++this.booted}`,
          databaseUrl: url,
          shutdownTimeoutMs: 300,
          rescueIntervalMs: 500,
        });
        if (!process.env.CHECK_VERBOSE) Logger.overrideLogger(false); // (the testing module sets its own on each boot)
        return app;
      } catch (err) {
        // Its connections were dropped while it booted (a drop of the fault plan): boot it again.
        if (tries >= 40) throw new Error(`the checker could not boot a ${label} instance: ${(err as Error).message}`);
        await pause(250);
      }
    }
  }

  /** A client through the proxy (the test database's own go to its URL); disconnected by close(). */
  private prismaAt(url: string): PrismaClient {
    const client = terminablePrisma(url, 12);
    ownerOf.set(client, this.db.url);
    this.clients.push(client);
    return client;
  }

  /** Runs one trial; returns what it violated (empty: the engine held). */
  async trial(program: Program, plan: FaultPlan): Promise<string[]> {
    this.stats.trials++;
    const want = expected(program);
    const maxAttempts = want.failures + 8;
    outside.slow.clear();
    const runs: Run[] = [];
    for (const [label, api] of [['clean', this.cleanApi], ['faulty', this.faultyApi]] as const) {
      const ids: string[] = [];
      for (let i = 0; i < INSTANCES; i++) ids.push(await api.queue.enqueue(WORKFLOW_QUEUE, { run: label, program } satisfies ProgramInput as never, { maxAttempts }));
      this.stats.workflows += INSTANCES;
      runs.push({ label, ids, cancelled: new Map() });
    }
    const started = Date.now();
    const violations: string[] = [];
    const pending: Promise<unknown>[] = [];
    const signals = signalsOf(program);
    const timing = (i: number, label: string): SignalTiming => (label === 'clean' ? 'late' : plan.signals[i % plan.signals.length]);
    const toSend = new Map<string, { run: Run; id: string; name: string; timing: SignalTiming; sent: number }>();
    for (const run of runs) {
      for (const id of run.ids) {
        signals.forEach((name, i) => toSend.set(`${run.label}:${id}:${name}`, { run, id, name, timing: timing(i, run.label), sent: 0 }));
      }
    }
    const send = (s: { run: Run; id: string; name: string; timing: SignalTiming; sent: number }) => {
      s.sent++;
      const api = s.run.label === 'clean' ? this.cleanApi : this.faultyApi;
      const once = () =>
        s.timing === 'in-long-tx'
          ? this.business[s.run.label].$transaction(async (tx) => {
              await api.queue.signal(s.id, s.name, payloadOf(s.name), { tx });
              await pause(1500);
            }, { timeout: 10_000 })
          : api.queue.signal(s.id, s.name, payloadOf(s.name));
      // A send the database failed (a restart ended its transaction) is sent again, as its sender
      // would; a finished or cancelled target refuses it, and that is final.
      const go = async () => {
        for (let tries = 1; ; tries++) {
          try {
            return await once();
          } catch (err) {
            if (err instanceof SignalTargetError || tries >= 20 || this.closed) return;
            await pause(250);
          }
        }
      };
      pending.push(go());
    };
    for (const s of toSend.values()) if (s.timing === 'early' || s.timing === 'in-long-tx') send(s);

    // The fault plan, on its own clock.
    const steps = callsOf(program).flatMap((c) => (c.op === 'step' ? [c] : c.op === 'patched' && c.then.op === 'step' ? [c.then] : []));
    const faults = plan.faults.map(async (f) => {
      await pause(f.at);
      // Only a process past its start-up runs workflows: a kill of one still starting is left out.
      if (f.kind === 'kill' && !this.process?.saw('READY')) return;
      this.stats.faults++;
      if (f.kind === 'drop') {
        this.proxy.refuse();
        this.dropping++;
        await pause(f.ms);
        if (--this.dropping === 0) this.proxy.admit(); // the last of overlapping drops
      } else if (f.kind === 'shutdown') {
        const old = this.faultyWorkers.shift();
        await old?.close().catch(() => undefined); // its pool may have met a drop as it closed (a close is not tried twice)
        this.faultyWorkers.push(await this.worker('faulty'));
      } else if (f.kind === 'kill') {
        const victim = this.process!;
        await this.processBusy(2000);
        if (this.process !== victim) {
          this.stats.faults--; // another kill of this plan took it meanwhile: not one more fault
          return;
        }
        this.stats.kills++;
        this.process = this.workerProcess();
        await victim.kill();
      } else if (f.kind === 'restart') {
        // Every session of the faulty run ends; back within seconds. One restart at a time (pg_ctl).
        this.restarting = this.restarting.then(() => this.faultyDb.restart());
        await this.restarting;
      } else if (f.kind === 'slow') {
        if (steps.length > 0) outside.slow.set(`faulty:${steps[f.step % steps.length].name}`, ATTEMPT_TIMEOUT_MS + 2500);
      } else {
        const run = runs[1];
        const id = run.ids[f.instance];
        if (run.cancelled.has(id)) return; // the first cancel's answer is the one that counts
        run.cancelled.set(id, 'under way');
        run.cancelled.set(id, await again(() => this.faultyApi.queue.cancel(id))); // (the cluster may be restarting)
      }
    });

    const runningSince = new Map<string, number>();
    const final = new Map<string, TaskInfo>();
    const finalStates = new Set(['done', 'dead', 'cancelled']);
    try {
      // Watch the rows until every workflow has ended: send late signals, time the attempts.
      while (final.size < INSTANCES * 2 && Date.now() - started < TRIAL_DEADLINE_MS) {
        for (const run of runs) {
          const api = run.label === 'clean' ? this.cleanApi : this.faultyApi;
          for (const id of run.ids) {
            const key = `${run.label}:${id}`;
            if (final.has(key)) continue;
            const t = await api.queue.get(id).catch(() => null); // (the faulty run's cluster may be restarting)
            if (!t) continue;
            if (finalStates.has(t.state)) final.set(key, t);
            if (t.state === 'running' && t.lockedBy) {
              const lease = `${key}:${t.lockedBy}:${t.startedAt?.getTime()}`;
              const since = runningSince.get(lease) ?? Date.now();
              runningSince.set(lease, since);
              if (Date.now() - since > ATTEMPT_TIMEOUT_MS + RUNNING_SLACK_MS && !violations.some((v) => v.startsWith(`${key}: an attempt`))) {
                violations.push(`${key}: an attempt has been running for ${Date.now() - since} ms, past its ${ATTEMPT_TIMEOUT_MS} ms timeout`);
              }
            }
            const waiting = t.workflow?.waitingFor;
            if (waiting?.kind === 'signal' && waiting.name) {
              const s = toSend.get(`${run.label}:${id}:${waiting.name}`);
              if (s && (s.timing === 'late' || s.timing === 'twice') && s.sent < (s.timing === 'twice' ? 2 : 1)) send(s);
            }
          }
        }
        await pause(100);
      }
    } finally {
      // Whatever happened above, no fault of this trial outlives it.
      for (const [i, r] of (await Promise.allSettled(faults)).entries()) {
        if (r.status === 'rejected') violations.push(`the fault ${JSON.stringify(plan.faults[i])} could not be carried out: ${(r.reason as Error)?.message}`);
      }
      this.proxy.admit();
      await Promise.allSettled(pending);
    }

    for (const run of runs) {
      const api = run.label === 'clean' ? this.cleanApi : this.faultyApi;
      const schema = run.label === 'clean' ? 'chk_clean' : 'chk_fault';
      // Faults that may cost an attempt: a step slowed past the timeout, a shutdown's, a kill's (rescued).
      const timeouts = run.label === 'faulty' ? plan.faults.filter((f) => f.kind !== 'drop' && f.kind !== 'cancel').length : 0;
      for (const id of run.ids) {
        const key = `${run.label}:${id}`;
        const t = final.get(key) ?? (await again(() => api.queue.get(id)));
        if (!t || !finalStates.has(t.state)) {
          violations.push(`${key}: still ${t?.state}${t?.workflow?.waitingFor ? ` waiting for ${JSON.stringify(t.workflow.waitingFor)}` : ''} after ${TRIAL_DEADLINE_MS} ms`);
          await api.queue.cancel(id).catch(() => undefined);
          continue;
        }
        const ends = run.label === 'faulty' ? plan.faults.filter((f) => f.kind === 'shutdown' || f.kind === 'kill' || f.kind === 'restart').length : 0;
        violations.push(...(await this.check(run, api, schema, id, t, want, timeouts, ends)).map((v) => `${key}: ${v}`));
      }
    }
    return violations;
  }

  /** `ends`: shutdowns, kills and restarts, after which the rescue may count an attempt. */
  private async check(run: Run, api: QueueApp, schema: string, id: string, t: TaskInfo, want: Expected, timeouts: number, ends: number): Promise<string[]> {
    const out: string[] = [];
    const cancel = run.cancelled.get(id);
    const exact = cancel === undefined || cancel === 'not-cancellable';
    // A cancel that met the workflow dead (the model's end) may move it to the archive as cancelled
    // while get() still reads it dead: an end either way.
    if (cancel === 'cancelled' && t.state !== 'cancelled' && !(t.state === 'dead' && want.state === 'dead')) out.push(`cancel() answered 'cancelled' but it ended ${t.state}`);
    if (exact || t.state !== 'cancelled') {
      if (t.state !== want.state) out.push(`ended ${t.state} (${firstLine(t.lastError) ?? 'no error'}), the model says ${want.state}${want.error ? ` (${want.error})` : ''}`);
      else if (want.state === 'done' && JSON.stringify(t.result) !== JSON.stringify(want.result)) out.push(`returned ${JSON.stringify(t.result)}, the model says ${JSON.stringify(want.result)}`);
      else if (want.state === 'dead' && !(t.lastError ?? '').includes(want.error!) && !(ends > 0 && RESCUED.test(t.lastError ?? '')) && !(timeouts > 0 && /^TaskTimeoutError/.test(t.lastError ?? ''))) {
        // A workflow that dies uses up its attempts, and a fault may have cost the last one: a kill
        // (or a shutdown whose releases met a drop) as a crash does, a slow step or a restart as a timeout.
        out.push(`died of "${t.lastError}", the model says "${want.error}"`);
      }
    }
    const db = this.dbOf(run.label);
    const ledger = (await db.sql<{ entry: string }>('SELECT entry FROM chk_ledger WHERE run = $1 AND workflow = $2', [run.label, id])).map((r) => r.entry).sort();
    const counts = await db.sql<{ queue: string; n: number }>(
      `SELECT queue, count(*)::int AS n FROM (SELECT queue FROM ${schema}.task WHERE parent_id = $1 UNION ALL SELECT queue FROM ${schema}.task_archive WHERE parent_id = $1) c GROUP BY queue`,
      [id],
    );
    const count = (q: string) => counts.find((c) => c.queue === q)?.n ?? 0;
    const consumed = (await db.sql<{ name: string }>(`SELECT name FROM ${schema}.workflow_signal WHERE task_id = $1 AND consumed_seq IS NOT NULL`, [id])).map((r) => r.name).sort();
    const sameOrSubset = (got: string[], wanted: string[]) => {
      if (exact || t.state === 'done') return JSON.stringify(got) === JSON.stringify([...wanted].sort());
      const left = [...wanted];
      return got.every((g) => left.includes(g) && left.splice(left.indexOf(g), 1));
    };
    if (!sameOrSubset(ledger, want.ledger)) out.push(`ledger rows ${JSON.stringify(ledger)}, the model says each of ${JSON.stringify(want.ledger)} once`);
    if (!sameOrSubset(consumed, want.consumed)) out.push(`consumed signals ${JSON.stringify(consumed)}, the model says ${JSON.stringify(want.consumed)}`);
    for (const [queue, n] of [['chk.follow', want.followUps], ['chk.child', want.children]] as const) {
      if (exact || t.state === 'done' ? count(queue) !== n : count(queue) > n) out.push(`${count(queue)} tasks of ${queue}, the model says ${n}`);
    }
    if (t.state === 'done' && t.attempt > want.failures + 1 + timeouts) {
      out.push(`took ${t.attempt} attempts; the program fails at most ${want.failures} and ${timeouts} fault(s) could time one out`);
    }
    // Every failed attempt, whichever instance or process ran it, as the task's log keeps it.
    for (const f of ((await again(() => api.queue.getLogs(id))) ?? []).filter((e) => e.kind === 'error')) {
      const own = /(transient|retried|permanent) s\d+|wrapped k\d+|the child fails/.test(f.message);
      const timedOut = run.label === 'faulty' && /timed out after/.test(f.message);
      const rescued = ends > 0 && RESCUED.test(f.message);
      if (rescued) this.stats.rescued++;
      const cancelled = cancel !== undefined && /^TaskCancelledError/.test(f.message);
      if (!own && !timedOut && !rescued && !cancelled) out.push(`an attempt failed with an error the program never threw: ${firstLine(f.message)}`);
    }
    const keys = await this.db.sql<{ step: string; keys: string[] }>('SELECT step, array_agg(DISTINCT key) AS keys FROM chk_outside WHERE run = $1 AND workflow = $2 GROUP BY step', [run.label, id]);
    for (const { step, keys: seen } of keys) {
      if (seen.length !== 1 || !seen[0].startsWith(`${id}:`)) out.push(`step ${step} ran with step keys ${seen.join(', ')}`);
    }
    return [...new Set(out)];
  }
}

/** `read`, tried again a few times: a pool's first statement after a restart meets its dead connection. */
async function again<T>(read: () => Promise<T>): Promise<T> {
  for (let tries = 1; ; tries++) {
    try {
      return await read();
    } catch (err) {
      if (tries >= 5) throw err;
      await pause(200);
    }
  }
}

/** What the rescue writes for an attempt whose instance died (liveness.sql.ts, maintain.sql.ts). */
const RESCUED = /^(instance gone|lease expired)/;

function firstLine(text: string | null | undefined): string | null {
  return text == null ? null : text.split('\n')[0];
}

/** The report of a failed trial: the program as code, the plan, and what it violated. */
export function describeFailure(program: Program, plan: FaultPlan, violations: string[]): string {
  return [`program:\n${show(program)}`, `fault plan: ${JSON.stringify(plan)}`, 'violations:', ...violations.map((v) => `  - ${v}`)].join('\n');
}
