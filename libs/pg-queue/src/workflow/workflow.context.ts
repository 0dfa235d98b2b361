import { LeaseLostError, NonRetryableError, PgQueueError } from '../errors';
import { buildTaskRow, serialisePayload, type RowLimits } from '../core/task-input';
import { currentTraceContext, inStepSpan } from '../observability/tracing';
import type { WorkflowRepository } from '../sql/workflow.repository';
import { WORKFLOW_TX_BOUNDS, type ParkRequest } from '../sql/workflow.repository';
import type { NewTaskRow } from '../sql/statement-values';
import type { FollowUpOptions, PrismaClientLike, SqlExecutor } from '../types';
import type { Attempt } from '../worker/attempt';
import type { DatabaseClock } from '../worker/database.clock';
import { storableText, truncateUtf8 } from '../worker/error-text';
import { ReplayCursor, type CallKind, type JournalEntry } from './journal';
import type { JournalWriter } from './journal.writer';
import { ChildWorkflowError, StepFailedError } from './workflow.errors';
import { runStep } from './step.retries';
import type { StepOptions, TransactionStepOptions, WorkflowContext } from './workflow.api';

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

const NEVER = new Promise<never>(() => undefined);
/** What a call that parks throws inside `op`: its own promise settles, the caller's never does. */
const PARKING = Symbol('pg-queue workflow parking');

/** The value a run's `parked` promise resolves to. */
export const PARKED: unique symbol = Symbol('pg-queue workflow parked');

/** One attempt of a workflow: the context its method receives. */
export class WorkflowRun implements WorkflowContext {
  /** Resolves with PARKED once a call parked the workflow: the runner stops waiting for the method. */
  readonly parked: Promise<typeof PARKED>;
  park: ParkRequest | null = null;
  private resolvePark!: (v: typeof PARKED) => void;
  private readonly inFlight = new Set<Promise<unknown>>();
  /** The position of the call each error came from (recorded or replayed), to forget it if it fails the attempt. */
  private readonly errorCalls = new WeakMap<object, number>();

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
      if (entry) return this.replayed(seq, entry, name);
      const started = performance.now();
      try {
        return await this.recordValue(seq, 'step', name, await inStepSpan('step', name, this.a.task.id, () => runStep(fn, options, this.a.signal)), started);
      } catch (err) {
        if (err instanceof LeaseLostError) throw err;
        await this.recordError(seq, 'step', name, err, started);
        throw err;
      }
    });
  }

  transaction<T>(name: string, fn: (tx: any) => Promise<T>, options: TransactionStepOptions = {}): Promise<T> {
    const { seq, entry } = this.position('transaction', name);
    return this.op(async () => {
      if (entry) return this.replayed(seq, entry, name);
      const started = performance.now();
      let json: string;
      try {
        json = await inStepSpan('transaction', name, this.a.task.id, () => this.deps.prisma.$transaction(async (tx) => {
          const value = this.json(await fn(tx), name);
          if (!(await this.deps.repo.record(tx, this.a.lease, seq, 'transaction', name, 'ok', value, performance.now() - started))) throw this.lost();
          return value;
        }, { maxWait: WORKFLOW_TX_BOUNDS.maxWait, timeout: options.timeoutMs ?? 30_000 }));
      } catch (err) {
        if (err instanceof LeaseLostError) throw err;
        await this.recordError(seq, 'transaction', name, err, started); // rolled back: nothing of it stays
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
      if (entry?.outcome === 'ok') return (entry.result?.v ?? null) as T | null;
      const got = await this.deps.repo.takeSignal(this.deps.prisma, this.a.lease, seq, name, options.timeoutMs ?? null);
      if (!got.held) throw this.lost();
      if (got.took) return got.payload as T;
      const until = got.until === null ? null : Date.parse(got.until);
      if (until !== null && until <= got.nowMs) {
        if (!(await this.deps.repo.resolve(this.deps.prisma, this.a.lease, seq, 'ok', '{"v":null}'))) throw this.lost();
        return null;
      }
      return this.parkOn({ waitingFor: `signal:${name}`, wakeAt: until, signal: name, childSeq: null });
    });
  }

  enqueue(queue: string, payload: unknown, options?: FollowUpOptions): Promise<string> {
    const { seq, entry } = this.position('enqueue', queue);
    return this.op(async () => {
      if (entry) return entry.result.id as string;
      return this.insertOnce(seq, 'enqueue', queue, queue, payload, options, false);
    });
  }

  child<R = unknown>(name: string, queue: string, input: unknown, options?: FollowUpOptions): Promise<R> {
    const { seq, entry } = this.position('child', name);
    return this.op(async () => {
      if (entry?.outcome === 'ok') return entry.result.v as R;
      if (entry?.outcome === 'error') throw this.failedAt(seq, new ChildWorkflowError(entry.result.id, queue, entry.result.state));
      const childId = entry ? (entry.result.id as string) : await this.insertOnce(seq, 'child', name, queue, input, options, true);
      return this.parkOn({ waitingFor: `child:${childId}`, wakeAt: null, signal: null, childSeq: seq });
    });
  }

  async patched(id: string): Promise<boolean> {
    const { value, mark } = this.cursor.patched(id);
    if (mark !== null) {
      await this.op(async () => {
        if (!(await this.deps.journal.record({ lease: this.a.lease, seq: mark, kind: 'patch', name: id, outcome: 'ok', resultJson: '{}', sinceMs: 0 }))) throw this.lost();
      });
    }
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
    while (this.inFlight.size > 0 && !this.a.aborted) {
      await Promise.race([Promise.allSettled([...this.inFlight]), new Promise<void>((resolve) => this.a.signal.addEventListener('abort', () => resolve(), { once: true }))]);
    }
  }

  private sleepTo(until: () => number): Promise<void> {
    const { seq, entry } = this.position('sleep', 'sleep');
    return this.op(async () => {
      let at: number;
      if (entry) at = Date.parse(entry.result.until);
      else {
        at = until();
        const json = JSON.stringify({ until: new Date(at).toISOString() });
        if (!(await this.deps.journal.record({ lease: this.a.lease, seq, kind: 'sleep', name: 'sleep', outcome: 'ok', resultJson: json, sinceMs: 0 }))) throw this.lost();
      }
      if (this.deps.clock.msUntil(at) <= 0) return;
      return this.parkOn({ waitingFor: 'sleep', wakeAt: at, signal: null, childSeq: null });
    });
  }

  /** Inserts a task and records the call in one transaction: exactly once. A child is linked to this workflow. */
  private async insertOnce(seq: number, kind: CallKind, name: string, queue: string, payload: unknown, options: FollowUpOptions | undefined, child: boolean): Promise<string> {
    const row = buildTaskRow(queue, payload, options, this.deps.rowLimits, this.a.task.id, currentTraceContext());
    const started = performance.now();
    return this.deps.prisma.$transaction(async (tx) => {
      const [id] = await this.deps.insert(tx, [row]);
      if (child) await this.deps.repo.linkChild(tx, this.a.task.id, id);
      const outcome = child ? 'waiting' : 'ok';
      if (!(await this.deps.repo.record(tx, this.a.lease, seq, kind, name, outcome, JSON.stringify({ id }), performance.now() - started))) throw this.lost();
      return id;
    }, WORKFLOW_TX_BOUNDS);
  }

  private async recordValue<T>(seq: number, kind: CallKind, name: string, value: T, started: number): Promise<T> {
    const json = this.json(value, name);
    if (!(await this.deps.journal.record({ lease: this.a.lease, seq, kind, name, outcome: 'ok', resultJson: json, sinceMs: performance.now() - started }))) throw this.lost();
    const result = JSON.parse(json);
    this.cursor.recorded({ seq, kind, name, outcome: 'ok', result });
    return result.v as T; // as a replay will see it (JSON): Dates become strings on every run alike
  }

  private async recordError(seq: number, kind: CallKind, name: string, err: unknown, started: number): Promise<void> {
    const json = JSON.stringify({ error: journaledError(err) });
    if (!(await this.deps.journal.record({ lease: this.a.lease, seq, kind, name, outcome: 'error', resultJson: json, sinceMs: performance.now() - started }))) throw this.lost();
    this.failedAt(seq, err);
  }

  /** The call whose (recorded) error `err` is, or its cause's; null for an error from elsewhere. */
  failedCall(err: unknown): number | null {
    for (let e = err, depth = 0; typeof e === 'object' && e !== null && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
      const seq = this.errorCalls.get(e);
      if (seq !== undefined) return seq;
    }
    return null;
  }

  private failedAt<E>(seq: number, err: E): E {
    if (typeof err === 'object' && err !== null) this.errorCalls.set(err, seq);
    return err;
  }

  /** A journaled outcome, as the call returns or throws it. */
  private replayed(seq: number, entry: JournalEntry, name: string): any {
    if (entry.outcome === 'error') throw this.failedAt(seq, new StepFailedError(name, entry.result.error.name, entry.result.error.message));
    return entry.result?.v;
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
  private parkOn(request: ParkRequest): never {
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
    if (this.park !== null) return NEVER;
    const p = fn();
    this.inFlight.add(p);
    const done = () => this.inFlight.delete(p);
    p.then(done, done);
    return p.catch((err: unknown) => (err === PARKING ? NEVER : Promise.reject(err)));
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
