import { DatabaseUnavailableError, LeaseLostError, NonRetryableError, PgQueueError } from '../errors';
import { isConnectionGone, isDatabaseUnavailable } from '../sql/database-error';
import { buildTaskRow, serialisePayload, type RowLimits } from '../core/task-input';
import { currentTraceContext, inStepSpan } from '../observability/tracing';
import { type WorkflowRepository, WORKFLOW_TX_BOUNDS, type JournalRecord, type ParkRequest } from '../sql/workflow.repository';
import type { NewTaskRow } from '../sql/statement-values';
import type { FollowUpOptions, PrismaClientLike, SqlExecutor, BackoffOptions } from '../types';
import type { Attempt } from '../worker/attempt';
import type { DatabaseClock } from '../worker/database.clock';
import { storableText, truncateUtf8 } from '../worker/error-text';
import { ReplayCursor, type CallKind, type JournalEntry } from './journal';
import type { JournalWriter } from './journal.writer';
import { ChildWorkflowError, StepFailedError, StepTimeoutError } from './workflow.errors';
import type { StepOptions, TransactionStepOptions, WorkflowContext } from './workflow.api';
import { backoffDelayMs } from '../worker/backoff';

/** What a run needs from the worker. */
export interface WorkflowRunDeps {
  prisma: PrismaClientLike;
  repo: WorkflowRepository;
  insert(db: SqlExecutor, rows: NewTaskRow[]): Promise<string[]>;
  rowLimits: RowLimits;
  clock: DatabaseClock;
  /** Journals calls outside a transaction, those that end together in one statement. */
  journal: JournalWriter;
}

/**
 * A promise that never settles, for a call that parked or was given up. One per call: a shared one
 * would keep every awaiting method (and its run, attempt and journal) reachable for good.
 */
const never = <T>(): Promise<T> => new Promise<T>(() => undefined);
/** What a call that parks throws inside `op`: its own promise settles, the caller's never does. */
const PARKING = Symbol('pg-queue workflow parking');
/** No error of the step's function yet (see transaction). */
const NO_ERROR = Symbol('pg-queue no error');

/** The value a run's `parked` promise resolves to. */
export const PARKED: unique symbol = Symbol('pg-queue workflow parked');

/** One attempt of a workflow: the context its method receives. */
export class WorkflowRun implements WorkflowContext {
  /** Resolves with PARKED once a call parked the workflow: the runner stops waiting for the method. */
  readonly parked: Promise<typeof PARKED>;
  park: Omit<ParkRequest, 'keep'> | null = null;
  private resolvePark!: (v: typeof PARKED) => void;
  private readonly inFlight = new Set<Promise<unknown>>();
  /**
   * Whether this run met a failure of a step or a transaction that no park has kept yet (it
   * journaled one, or replayed one that an attempt ending without a park journaled). Such failures,
   * and the steps that succeed after them (the way from a failure to the attempt's end: a log, a
   * compensation, a fallback), are journaled as tentative: a failure of the attempt forgets them
   * and the retry runs them again (WorkflowRunner); a park keeps them. Steps before the first
   * failure keep their results, as transactions, enqueues, children, sleeps and signals always do.
   */
  failing = false;
  /**
   * A failure journaled after a call asked to park (a concurrent branch's): the code never got to
   * handle it (its next call never returns), so the park must not keep it (see park in workflow.sql.ts).
   */
  failedWhileParking = false;

  constructor(
    private readonly a: Attempt,
    readonly cursor: ReplayCursor,
    private readonly deps: WorkflowRunDeps,
  ) {
    this.parked = new Promise((resolve) => (this.resolvePark = resolve));
  }

  get workflowId(): string {
    return this.a.task.id;
  }

  get signal(): AbortSignal {
    return this.a.signal;
  }

  stepKey(name: string): string {
    return `${this.a.task.id}:${name}`;
  }

  step<T>(name: string, fn: () => T | Promise<T>, options: StepOptions = {}): Promise<T> {
    const { seq, entry } = this.position('step', name);
    return this.op(async () => {
      if (entry) return this.replayed(entry, name);
      const started = performance.now();
      let value: T;
      try {
        value = await inStepSpan('step', name, this.a.task.id, () => runStep(fn, options, this.a.signal));
      } catch (err) {
        // Given up (a shutdown, a timeout, a cancel): an abort is not the step's outcome, it runs again.
        if (this.a.aborted) throw err;
        await this.recordError(seq, 'step', name, err, started);
        throw err;
      }
      return this.recordValue(seq, 'step', name, value, started);
    });
  }

  transaction<T>(name: string, fn: (tx: any) => Promise<T>, options: TransactionStepOptions = {}): Promise<T> {
    const { seq, entry } = this.position('transaction', name);
    return this.op(async () => {
      if (entry) return this.replayed(entry, name);
      const started = performance.now();
      let json: string;
      let fnError: unknown = NO_ERROR;
      try {
        json = await inStepSpan('transaction', name, this.a.task.id, () => this.deps.prisma.$transaction(async (tx) => {
          let value: T;
          try {
            value = await fn(tx);
          } catch (err) {
            fnError = err;
            throw err;
          }
          const json = this.json(value, name);
          if (!(await this.deps.repo.record(tx, this.a.lease, seq, 'transaction', name, 'ok', json, performance.now() - started))) throw this.lost();
          return json;
        }, { maxWait: WORKFLOW_TX_BOUNDS.maxWait, timeout: options.timeoutMs ?? 30_000 }));
      } catch (err) {
        if (this.a.aborted || err === this.fatal) throw err;
        // Rolled back: nothing of it stays. Only the function's own error is the step's outcome; a
        // transaction that could not start or commit, or a lost connection, runs the step again.
        // (The function's own statement timeout or deadlock is its failure: retried and counted.)
        if (err !== fnError || isConnectionGone(err)) throw this.unavailable(err);
        await this.recordError(seq, 'transaction', name, err, started);
        throw err;
      }
      this.cursor.recorded({ seq, kind: 'transaction', name, outcome: 'ok', result: JSON.parse(json) });
      return JSON.parse(json).v as T;
    });
  }

  sleep(ms: number): Promise<void> {
    if (!Number.isFinite(ms) || ms < 0) throw new PgQueueError(`pg-queue: wf.sleep takes a number of ms >= 0, got ${String(ms)}`);
    return this.sleepTo(() => this.deps.clock.now() + ms);
  }

  sleepUntil(at: Date): Promise<void> {
    if (!(at instanceof Date) || Number.isNaN(at.getTime())) throw new PgQueueError('pg-queue: wf.sleepUntil takes a valid Date');
    return this.sleepTo(() => at.getTime());
  }

  waitForSignal<T = unknown>(name: string, options: { timeoutMs?: number } = {}): Promise<T | null> {
    const { seq, entry } = this.position('signal', name);
    return this.op(async () => {
      if (entry?.outcome === 'ok') return ((await this.resultOf(entry))?.v ?? null) as T | null;
      const got = await this.journaled(() => this.deps.repo.takeSignal(this.deps.prisma, this.a.lease, seq, name, options.timeoutMs ?? null));
      if (!got.held) throw this.lost();
      if (got.took) return got.payload as T;
      const until = got.until === null ? null : Date.parse(got.until);
      if (until !== null && until <= got.nowMs) {
        if (!(await this.journaled(() => this.deps.repo.resolve(this.deps.prisma, this.a.lease, seq, 'ok', '{"v":null,"timedOut":true}')))) throw this.lost();
        return null;
      }
      return this.parkOn({ waitingFor: `signal:${name}`, wakeAt: until, signal: name, childSeq: null });
    });
  }

  enqueue(queue: string, payload: unknown, options?: FollowUpOptions): Promise<string> {
    const { seq, entry } = this.position('enqueue', queue);
    return this.op(async () => {
      if (entry) return (await this.resultOf(entry)).id as string;
      return this.insertOnce(seq, 'enqueue', queue, queue, payload, options, false);
    });
  }

  child<R = unknown>(name: string, queue: string, input: unknown, options?: FollowUpOptions): Promise<R> {
    const { seq, entry } = this.position('child', name);
    return this.op(async () => {
      const result = entry ? await this.resultOf(entry) : null;
      if (entry?.outcome === 'ok') return result.v as R;
      if (entry?.outcome === 'error') throw new ChildWorkflowError(result.id, queue, result.state);
      const childId = entry ? (result.id as string) : await this.insertOnce(seq, 'child', name, queue, input, options, true);
      return this.parkOn({ waitingFor: `child:${childId}`, wakeAt: null, signal: null, childSeq: seq });
    });
  }

  async patched(id: string): Promise<boolean> {
    let patch: { value: boolean; mark: number | null };
    try {
      patch = this.cursor.patched(id);
    } catch (err) {
      this.fatal ??= err as Error;
      throw err;
    }
    const { value, mark } = patch;
    if (mark !== null) await this.op(() => this.write({ lease: this.a.lease, seq: mark, kind: 'patch', name: id, outcome: 'ok', resultJson: '{}', sinceMs: 0 }));
    return value;
  }

  /**
   * The first error that must end the workflow whatever its code does with it (a replay mismatch, a
   * repeated step name, a result that cannot be stored): a catch-all around the calls cannot hide it.
   */
  fatal: Error | null = null;

  /** The cursor's position for a call; a mismatch or a repeated name is kept as fatal. */
  private position(kind: CallKind, name: string): { seq: number; entry: JournalEntry | null } {
    try {
      return this.cursor.call(kind, name);
    } catch (err) {
      this.fatal ??= err as Error;
      throw err;
    }
  }

  /** Resolves once every call under way has settled, or the attempt was given up. */
  async settled(): Promise<void> {
    if (this.inFlight.size === 0 || this.a.aborted) return;
    let onAbort!: () => void;
    const aborted = new Promise<void>((resolve) => (onAbort = resolve));
    this.a.signal.addEventListener('abort', onAbort, { once: true });
    try {
      while (this.inFlight.size > 0 && !this.a.aborted) await Promise.race([Promise.allSettled([...this.inFlight]), aborted]);
    } finally {
      this.a.signal.removeEventListener('abort', onAbort);
    }
  }

  private sleepTo(until: () => number): Promise<void> {
    const { seq, entry } = this.position('sleep', 'sleep');
    return this.op(async () => {
      let at: number;
      if (entry) at = Date.parse((await this.resultOf(entry)).until);
      else {
        at = until();
        const json = JSON.stringify({ until: new Date(at).toISOString() });
        await this.write({ lease: this.a.lease, seq, kind: 'sleep', name: 'sleep', outcome: 'ok', resultJson: json, sinceMs: 0 });
      }
      if (this.deps.clock.msUntil(at) <= 0) return;
      return this.parkOn({ waitingFor: 'sleep', wakeAt: at, signal: null, childSeq: null });
    });
  }

  /** Inserts a task and records the call in one transaction: exactly once. A child is linked to this workflow. */
  private async insertOnce(seq: number, kind: CallKind, name: string, queue: string, payload: unknown, options: FollowUpOptions | undefined, child: boolean): Promise<string> {
    const row = buildTaskRow(queue, payload, options, this.deps.rowLimits, this.a.task.id, currentTraceContext());
    const started = performance.now();
    return this.journaled(() => this.deps.prisma.$transaction(async (tx) => {
      const [id] = await this.deps.insert(tx, [row]);
      if (child) await this.deps.repo.linkChild(tx, this.a.task.id, id);
      const outcome = child ? 'waiting' : 'ok';
      if (!(await this.deps.repo.record(tx, this.a.lease, seq, kind, name, outcome, JSON.stringify({ id }), performance.now() - started))) throw this.lost();
      return id;
    }, WORKFLOW_TX_BOUNDS));
  }

  private async recordValue<T>(seq: number, kind: CallKind, name: string, value: T, started: number): Promise<T> {
    const json = this.json(value, name);
    await this.write({ lease: this.a.lease, seq, kind, name, outcome: 'ok', resultJson: json, sinceMs: performance.now() - started, kept: !this.failing });
    const result = JSON.parse(json);
    this.cursor.recorded({ seq, kind, name, outcome: 'ok', result });
    return result.v as T; // as a replay will see it (JSON): Dates become strings on every run alike
  }

  private async recordError(seq: number, kind: CallKind, name: string, err: unknown, started: number): Promise<void> {
    const json = JSON.stringify({ error: journaledError(err) });
    this.failing = true;
    if (this.park !== null) this.failedWhileParking = true;
    await this.write({ lease: this.a.lease, seq, kind, name, outcome: 'error', resultJson: json, sinceMs: performance.now() - started, kept: false });
  }

  /** Journals an entry outside a transaction (batched, see JournalWriter); a lost lease or database ends the attempt. */
  private async write(entry: JournalRecord): Promise<void> {
    if (!(await this.journaled(() => this.deps.journal.record(entry)))) throw this.lost();
  }

  /**
   * A statement of the journal's own. If it fails, the call it journals has no outcome: the attempt
   * ends (see unavailable), so the workflow's code never sees the database's error as the call's.
   */
  private async journaled<T>(statement: () => Promise<T>): Promise<T> {
    try {
      return await statement();
    } catch (err) {
      if (err instanceof LeaseLostError || this.a.aborted) throw err;
      throw this.unavailable(err);
    }
  }

  /**
   * Ends the attempt on a database failure of the journal's (its write, a transaction that could
   * not start or commit, a reply lost after a commit): given back uncounted when the database was
   * unreachable or busy (DatabaseUnavailableError), else failed as any attempt; what the attempt
   * journaled before stays, and the next attempt replays it, or runs again what it lacks.
   */
  private unavailable(err: unknown): unknown {
    const reason = isDatabaseUnavailable(err) ? DatabaseUnavailableError.under(`workflow ${this.a.task.id}'s journal`, err) : err;
    this.a.abort(reason);
    return reason;
  }

  /** A journaled outcome, as the call returns or throws it. */
  private async replayed(entry: JournalEntry, name: string): Promise<any> {
    if (entry.kept === false) this.failing = true;
    const result = await this.resultOf(entry);
    if (entry.outcome === 'error') throw new StepFailedError(name, result.error.name, result.error.message);
    return result?.v;
  }

  /**
   * The stored result of an entry a call replays, read now if the journal's load deferred it; the
   * entry lets go of it (each entry is replayed once), so a long attempt does not hold them all.
   */
  private async resultOf(entry: JournalEntry): Promise<any> {
    let result = entry.result;
    if (entry.deferred) {
      const read = await this.journaled(() => this.deps.repo.result(this.deps.prisma, this.a.lease, entry.seq));
      if (read === null) throw this.lost();
      result = read.result;
    }
    entry.result = undefined;
    entry.deferred = false;
    return result;
  }

  /** A call's result as stored; one that cannot be (too large, not JSON) fails the workflow, as no retry would change it. */
  private json(value: unknown, name: string): string {
    try {
      return serialisePayload(this.a.task.queue, { v: value }, this.deps.rowLimits.maxPayloadBytes);
    } catch (err) {
      const reason = (err as Error).message.replace(/^pg-queue: /, '');
      const fatal = new NonRetryableError(`pg-queue: workflow ${this.a.task.id}: the result of "${name}" cannot be journaled: ${reason}; store a large value elsewhere and return its key`);
      this.fatal ??= fatal;
      throw fatal;
    }
  }

  /** Ends the attempt as parked (the runner records it); the call never returns in this run. */
  private parkOn(request: Omit<ParkRequest, 'keep'>): never {
    if (this.park === null) {
      this.park = request;
      this.resolvePark(PARKED);
    }
    throw PARKING;
  }

  /**
   * Tracks a call, so a park or a return waits for the calls under way (a call that parks is no
   * longer under way: its promise for the workflow never settles); after a park nothing new starts.
   */
  private op<T>(fn: () => Promise<T>): Promise<T> {
    // After a park, or once the attempt is given up, nothing new starts: a catch that compensates
    // on a shutdown's abort would run its compensation for a step that is only interrupted.
    if (this.park !== null || this.a.aborted) return never();
    const p = fn();
    this.inFlight.add(p);
    const done = () => this.inFlight.delete(p);
    p.then(done, done);
    return p.catch((err: unknown) => (err === PARKING || this.a.aborted ? never<T>() : Promise.reject(err)));
  }

  private lost(): LeaseLostError {
    const err = new LeaseLostError(this.a.task.id);
    this.a.abort(err);
    return err;
  }
}

/**
 * A step's error as journaled: its name and message, cleaned as the database stores text (no
 * U+0000, no lone surrogate: jsonb rejects either) and cut at a character boundary, so the entry
 * is always storable and a replay throws the same text.
 */
function journaledError(err: unknown): { name: string; message: string } {
  const e = err as { name?: unknown; message?: unknown } | null;
  const name = typeof e?.name === 'string' ? storableText(e.name) : 'Error';
  return { name: truncateUtf8(name, 200), message: truncateUtf8(storableText(String(e?.message ?? err)), 4000) };
}

const DEFAULT_STEP_BACKOFF: BackoffOptions = { type: 'exponential', delayMs: 500, maxDelayMs: 30_000 };

/**
 * Runs a step's function up to `o.maxAttempts` times within the attempt (`o.backoff` between runs,
 * `o.timeoutMs` per run), until `signal` fires: the step's own retries, before its error reaches
 * the workflow.
 */
export async function runStep<T>(fn: () => T | Promise<T>, o: StepOptions, signal: AbortSignal): Promise<T> {
  const max = Math.max(1, o.maxAttempts ?? 1);
  for (let run = 1; ; run++) {
    if (signal.aborted) throw signal.reason;
    try {
      return await withTimeout(fn, o.timeoutMs);
    } catch (err) {
      if (run >= max || signal.aborted) throw err;
      await delay(backoffDelayMs(o.backoff ?? DEFAULT_STEP_BACKOFF, run), signal);
    }
  }
}

async function withTimeout<T>(fn: () => T | Promise<T>, timeoutMs: number | undefined): Promise<T> {
  if (timeoutMs === undefined) return fn();
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      Promise.resolve().then(fn),
      new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new StepTimeoutError(timeoutMs)), timeoutMs))),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

function delay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
