import { currentTraceContext } from '../observability/tracing';
import { InvalidEnqueueOptionsError, PgQueueError, RateLimitedError, type CooldownScope } from '../errors';
import { buildTaskRow, type RowLimits } from '../core/task-input';
import type { FollowUpOptions, FollowUpRef, HandlerMode, SqlExecutor, TaskContextBase } from '../types';
import type { Attempt } from './attempt';
import { AttemptReporter, type ReportSink } from './attempt.reporter';
import type { TransactionGate } from './transaction.gate';

/** What every context of one runner shares. */
export interface ContextScope {
  mode: HandlerMode;
  workerId: string;
  rowLimits: RowLimits;
  /** `ctx.heartbeat()` of an attempt. */
  heartbeat(attempt: Attempt): Promise<void>;
  /** `ctx.parentResults()`, read through `db` (in transactional mode the handler's transaction). */
  parentResults(taskId: string, db: SqlExecutor | null): Promise<Record<string, unknown>>;
  /** Throws DependencyNotFoundError unless every id exists (through `db`, as parentResults). */
  assertTasksExist(ids: string[], db: SqlExecutor | null): Promise<void>;
  /** Where `ctx.progress` and `ctx.log` write (see AttemptReporter). */
  reports: ReportSink;
}

/**
 * The `ctx` a handler receives. One is built per attempt, so it is a small object whose getters
 * live on the prototype: an object literal with getters and closures would cost several allocations
 * per task. Its members can be destructured (`const { enqueue, signal } = ctx`); it is not a plain
 * object, so spreading it (`{ ...ctx }`) copies nothing. The internals are `#private`: they do
 * not show in logs or spreads.
 */
export class AttemptContext implements TaskContextBase {
  readonly #attempt: Attempt;
  readonly #scope: ContextScope;
  /** Transactional mode: this task's part of the batch transaction. */
  readonly #gate: TransactionGate | null;
  #enqueue: TaskContextBase['enqueue'] | null = null;
  #heartbeat: TaskContextBase['heartbeat'] | null = null;
  #progress: TaskContextBase['progress'] | null = null;
  #log: TaskContextBase['log'] | null = null;

  constructor(attempt: Attempt, scope: ContextScope, gate: TransactionGate | null) {
    this.#attempt = attempt;
    this.#scope = scope;
    this.#gate = gate;
  }

  /** Bound on first use (most handlers never enqueue), so it also works detached from `ctx`. */
  get enqueue(): TaskContextBase['enqueue'] {
    return (this.#enqueue ??= enqueueFollowUp.bind(null, this.#attempt, this.#scope, this.#gate) as TaskContextBase['enqueue']);
  }

  get heartbeat(): TaskContextBase['heartbeat'] {
    return (this.#heartbeat ??= this.#scope.heartbeat.bind(this.#scope, this.#attempt));
  }

  /** Bound on first use like enqueue; the reporter is made by the first call, not here. */
  get progress(): TaskContextBase['progress'] {
    return (this.#progress ??= (value: unknown) => this.reporter().progress(value));
  }

  get log(): TaskContextBase['log'] {
    return (this.#log ??= (line: string) => this.reporter().log(line));
  }

  private reporter(): AttemptReporter {
    return (this.#attempt.reporter ??= new AttemptReporter(this.#attempt, this.#scope.reports));
  }

  get tx(): any {
    if (this.#gate === null) {
      // A compile error where the decorator states the mode (LeaseTaskContext has no tx).
      throw new PgQueueError(`pg-queue: ctx.tx is only available to transactional handlers (queue "${this.#attempt.task.queue}" runs in lease mode)`);
    }
    return this.#gate.client();
  }

  get signal(): AbortSignal {
    return this.#attempt.signal;
  }

  parentResults<R = unknown>(): Promise<Record<string, R>> {
    // Stored JSON: the handler states its type (see TaskContextBase.parentResults).
    return this.#scope.parentResults(this.#attempt.task.id, this.#gate?.client<SqlExecutor>() ?? null) as Promise<Record<string, R>>;
  }

  get workerId(): string {
    return this.#scope.workerId;
  }

  coolDown(retryAfterMs: number, options: { scope?: CooldownScope; reason?: string } = {}): never {
    throw new RateLimitedError({ retryAfterMs, ...options });
  }

  backOff(retryAfterMs: number, options: { scope?: CooldownScope; reason?: string } = {}): never {
    return this.coolDown(retryAfterMs, options);
  }

  get mode(): HandlerMode {
    return this.#scope.mode;
  }
}

async function enqueueFollowUp(
  attempt: Attempt,
  scope: ContextScope,
  gate: TransactionGate | null,
  queue: string,
  payload: unknown,
  options?: FollowUpOptions,
): Promise<FollowUpRef> {
  const refuseIfFinished = () => {
    if (attempt.finished) throw new PgQueueError(`pg-queue: ctx.enqueue called after task ${attempt.task.id}'s handler returned`);
  };
  refuseIfFinished();
  const row = buildTaskRow(queue, payload, options, scope.rowLimits, attempt.task.id, currentTraceContext());
  if (row.dependsOn !== null) {
    for (const [i, ref] of row.dependsOn.entries()) {
      // Only earlier follow-ups can be named, so follow-ups never form a cycle.
      if ('item' in ref && ref.item >= attempt.followUps.length) {
        throw new InvalidEnqueueOptionsError(`dependsOn[${i}]`, `names follow-up ${ref.item}, but this attempt has enqueued ${attempt.followUps.length} so far`);
      }
    }
    // Checked now, so the handler gets the error (the insert, at completion, checks again).
    await scope.assertTasksExist(row.dependsOn.flatMap((ref) => ('id' in ref ? [ref.id] : [])), gate?.client<SqlExecutor>() ?? null);
    refuseIfFinished();
  }
  return { item: attempt.followUps.push(row) - 1 };
}
