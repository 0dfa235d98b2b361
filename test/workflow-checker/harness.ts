/**
 * The generated-program workflow checker, part 3: a trial runs one generated program twice at once,
 * as INSTANCES workflows in each of two queue schemas: `clean` (one instance, nothing goes wrong)
 * and `faulty` (two instances whose database connections go through a StallProxy, under the
 * trial's fault plan: connections dropped, an instance shut down mid-call and replaced, a step slow
 * past the handler's timeout, signals sent early, late, twice or inside a long business
 * transaction, a cancel). Both runs are then held against the model (programs.ts `expect`): the
 * same state and result, each transaction's row once, each follow-up and child once, each signal
 * consumed once, no attempt counted that neither the program nor an injected timeout explains, no
 * failure whose error the program did not throw, no attempt `running` past its timeout, nothing
 * left `running` or `waiting` at the end, and a cancel that always ends the workflow.
 */
import fc from 'fast-check';
import { Logger } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import type { TaskEvent, TaskInfo } from '@app/pg-queue';
import { PrismaClient } from '../../src/generated/prisma/client';
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
  | { at: number; kind: 'slow'; step: number }
  | { at: number; kind: 'cancel'; instance: number };

export interface FaultPlan {
  /** How each signal is sent in the faulty run (cycled over the program's signals). */
  signals: SignalTiming[];
  faults: Fault[];
}

const at = fc.integer({ min: 0, max: 2500 });
/** CHECK_FAULTS (e.g. `shutdown,slow`): only these kinds of fault, to look at one. */
const kinds = new Set((process.env.CHECK_FAULTS ?? 'drop,shutdown,slow,cancel').split(','));
const faultArbs: fc.Arbitrary<Fault>[] = [
  fc.record({ at, kind: fc.constant('drop' as const), ms: fc.integer({ min: 50, max: 600 }) }),
  fc.record({ at, kind: fc.constant('shutdown' as const) }),
  fc.record({ at, kind: fc.constant('slow' as const), step: fc.nat(20) }),
  fc.record({ at, kind: fc.constant('cancel' as const), instance: fc.nat(INSTANCES - 1) }),
];
export const faultPlanArb: fc.Arbitrary<FaultPlan> = fc.record({
  signals: fc.array(fc.constantFrom<SignalTiming>('early', 'late', 'twice', 'in-long-tx'), { minLength: 1, maxLength: 6 }),
  faults: fc.array(fc.oneof(...faultArbs.filter((_, i) => kinds.has(['drop', 'shutdown', 'slow', 'cancel'][i]))), { minLength: 1, maxLength: 4 }),
});

interface Run {
  label: 'clean' | 'faulty';
  ids: string[];
  events: TaskEvent[];
  /** The faulty run's cancel, if its plan has one: the instance and what cancel() answered. */
  cancelled: Map<string, string>;
}

/** The apps of the two runs; kept across trials, the faulty run's replaced as faults shut them down. */
export class CheckerFleet {
  private cleanWorker!: QueueApp;
  private faultyWorkers: QueueApp[] = [];
  private cleanApi!: QueueApp;
  private faultyApi!: QueueApp;
  private proxy!: StallProxy;
  private readonly events = { clean: [] as TaskEvent[], faulty: [] as TaskEvent[] };
  private booted = 0;
  private readonly clients: PrismaClient[] = [];
  /** The app's own client, for the business transactions that send signals. */
  private business!: PrismaClient;
  private closed = false;
  /** Drops under way (they may overlap). */
  private dropping = 0;
  stats = { trials: 0, faults: 0, workflows: 0 };

  constructor(private readonly db: TestDatabase) {}

  async start(): Promise<void> {
    await this.db.sql('CREATE TABLE IF NOT EXISTS chk_ledger (run text NOT NULL, workflow text NOT NULL, entry text NOT NULL)');
    this.proxy = new StallProxy(Number(new URL(this.db.url).port));
    await this.proxy.start();
    this.business = this.db.prisma(6);
    this.cleanWorker = await this.worker('clean');
    this.cleanApi = await bootQueueApp(this.db.prisma(4), [], { schema: 'chk_clean', autoStart: false });
    this.faultyApi = await bootQueueApp(this.db.prisma(6), [], { schema: 'chk_fault', autoStart: false });
    for (let i = 0; i < 2; i++) this.faultyWorkers.push(await this.worker('faulty'));
  }

  async close(): Promise<void> {
    this.closed = true;
    this.proxy.admit();
    for (const a of [this.cleanWorker, ...this.faultyWorkers, this.cleanApi, this.faultyApi]) await a?.close().catch(() => undefined);
    await Promise.all(this.clients.map((c) => c.$disconnect().catch(() => undefined)));
    await this.proxy?.close();
  }

  private async worker(label: 'clean' | 'faulty'): Promise<QueueApp> {
    const viaProxy = label === 'faulty';
    for (let tries = 0; ; tries++) {
      if (this.closed) throw new Error('the checker is closing');
      try {
        const url = viaProxy ? this.proxy.url(this.db.url) : this.db.url;
        const prisma = viaProxy ? this.prismaAt(url) : this.db.prisma(12);
        const app = await bootQueueApp(prisma, [CheckedPrograms], {
          schema: label === 'clean' ? 'chk_clean' : 'chk_fault',
          workerId: `${label}-${++this.booted}`,
          databaseUrl: url,
          shutdownTimeoutMs: 300,
          rescueIntervalMs: 500,
        });
        app.queue.events$.subscribe((e) => this.events[label].push(e));
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
    const client = new PrismaClient({ adapter: new PrismaPg({ connectionString: url, max: 12 }) });
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
      runs.push({ label, ids, events: this.events[label], cancelled: new Map() });
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
      const go =
        s.timing === 'in-long-tx'
          ? this.business.$transaction(async (tx) => {
              await api.queue.signal(s.id, s.name, payloadOf(s.name), { tx });
              await pause(1500);
            }, { timeout: 10_000 })
          : api.queue.signal(s.id, s.name, payloadOf(s.name));
      pending.push(go.catch(() => undefined)); // a finished or cancelled target refuses it
    };
    for (const s of toSend.values()) if (s.timing === 'early' || s.timing === 'in-long-tx') send(s);

    // The fault plan, on its own clock.
    const steps = callsOf(program).flatMap((c) => (c.op === 'step' ? [c] : c.op === 'patched' && c.then.op === 'step' ? [c.then] : []));
    const faults = plan.faults.map(async (f) => {
      await pause(f.at);
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
      } else if (f.kind === 'slow') {
        if (steps.length > 0) outside.slow.set(`faulty:${steps[f.step % steps.length].name}`, ATTEMPT_TIMEOUT_MS + 2500);
      } else {
        const run = runs[1];
        const id = run.ids[f.instance];
        if (run.cancelled.has(id)) return; // the first cancel's answer is the one that counts
        run.cancelled.set(id, 'under way');
        run.cancelled.set(id, await this.faultyApi.queue.cancel(id));
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
            const t = await api.queue.get(id);
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
      const timeouts = run.label === 'faulty' ? plan.faults.filter((f) => f.kind === 'slow').length + plan.faults.filter((f) => f.kind === 'shutdown').length : 0;
      for (const id of run.ids) {
        const key = `${run.label}:${id}`;
        const t = final.get(key) ?? (await api.queue.get(id));
        if (!t || !finalStates.has(t.state)) {
          violations.push(`${key}: still ${t?.state}${t?.workflow?.waitingFor ? ` waiting for ${JSON.stringify(t.workflow.waitingFor)}` : ''} after ${TRIAL_DEADLINE_MS} ms`);
          await api.queue.cancel(id).catch(() => undefined);
          continue;
        }
        const shutdowns = run.label === 'faulty' ? plan.faults.filter((f) => f.kind === 'shutdown').length : 0;
        violations.push(...(await this.check(run, schema, id, t, want, timeouts, shutdowns)).map((v) => `${key}: ${v}`));
      }
    }
    return violations;
  }

  private async check(run: Run, schema: string, id: string, t: TaskInfo, want: Expected, timeouts: number, shutdowns: number): Promise<string[]> {
    const out: string[] = [];
    const cancel = run.cancelled.get(id);
    const exact = cancel === undefined || cancel === 'not-cancellable';
    // A cancel that met the workflow dead (the model's end) may move it to the archive as cancelled
    // while get() still reads it dead: an end either way.
    if (cancel === 'cancelled' && t.state !== 'cancelled' && !(t.state === 'dead' && want.state === 'dead')) out.push(`cancel() answered 'cancelled' but it ended ${t.state}`);
    if (exact || t.state !== 'cancelled') {
      if (t.state !== want.state) out.push(`ended ${t.state} (${firstLine(t.lastError) ?? 'no error'}), the model says ${want.state}${want.error ? ` (${want.error})` : ''}`);
      else if (want.state === 'done' && JSON.stringify(t.result) !== JSON.stringify(want.result)) out.push(`returned ${JSON.stringify(t.result)}, the model says ${JSON.stringify(want.result)}`);
      else if (want.state === 'dead' && !(t.lastError ?? '').includes(want.error!) && !(shutdowns > 0 && /^instance gone/.test(t.lastError ?? ''))) {
        // (A shutdown whose releases met a drop ends as a crash does: the rescue may count its last attempt.)
        out.push(`died of "${t.lastError}", the model says "${want.error}"`);
      }
    }
    const ledger = (await this.db.sql<{ entry: string }>('SELECT entry FROM chk_ledger WHERE run = $1 AND workflow = $2', [run.label, id])).map((r) => r.entry).sort();
    const counts = await this.db.sql<{ queue: string; n: number }>(
      `SELECT queue, count(*)::int AS n FROM (SELECT queue FROM ${schema}.task WHERE parent_id = $1 UNION ALL SELECT queue FROM ${schema}.task_archive WHERE parent_id = $1) c GROUP BY queue`,
      [id],
    );
    const count = (q: string) => counts.find((c) => c.queue === q)?.n ?? 0;
    const consumed = (await this.db.sql<{ name: string }>(`SELECT name FROM ${schema}.workflow_signal WHERE task_id = $1 AND consumed_seq IS NOT NULL`, [id])).map((r) => r.name).sort();
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
    const failures = run.events.filter((e) => e.taskId === id && e.queue === WORKFLOW_QUEUE && (e.type === 'failed' || e.type === 'dead'));
    for (const f of failures) {
      const own = /(transient|retried|permanent) s\d+|wrapped k\d+|the child fails/.test(f.error ?? '');
      const timedOut = run.label === 'faulty' && /timed out after/.test(f.error ?? '');
      if (!own && !timedOut) out.push(`an attempt failed with an error the program never threw: ${firstLine(f.error)}`);
    }
    for (const [key, seen] of outside.keys) {
      if (key.startsWith(`${run.label}:${id}:`) && (seen.size !== 1 || ![...seen][0].startsWith(`${id}:`))) out.push(`step ${key} ran with step keys ${[...seen].join(', ')}`);
    }
    return [...new Set(out)];
  }
}

function firstLine(text: string | null | undefined): string | null {
  return text == null ? null : text.split('\n')[0];
}

/** The report of a failed trial: the program as code, the plan, and what it violated. */
export function describeFailure(program: Program, plan: FaultPlan, violations: string[]): string {
  return [`program:\n${show(program)}`, `fault plan: ${JSON.stringify(plan)}`, 'violations:', ...violations.map((v) => `  - ${v}`)].join('\n');
}
