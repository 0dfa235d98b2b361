import type { CooldownScope } from './errors';
import type { FollowUpOptions, FollowUpRef, HandlerMode, PayloadOf, SqlExecutor, Task } from './types';

/** The `ctx` a handler receives, per mode, and the handler's own type. */

/** What a handler gets besides its task, in either mode. */
export interface TaskContextBase {
  /**
   * Enqueue a follow-up task; it is committed exactly when this task's completion is. The payload's
   * type follows the queue name when the app declares it in QueuePayloads. The returned reference
   * can go in a later follow-up's `dependsOn` (fan-out, then a join that waits for the parts).
   */
  enqueue<Q extends string>(queue: Q, payload: PayloadOf<Q>, options?: FollowUpOptions): Promise<FollowUpRef>;
  /** Extend the lease now (lease mode; also done automatically). Throws LeaseLostError if lost. */
  heartbeat(): Promise<void>;
  /** Fires on timeout, shutdown past the deadline, or a lost lease. */
  readonly signal: AbortSignal;
  readonly workerId: string;
  readonly mode: HandlerMode;
  /**
   * The results of the tasks this one depends on (enqueue option dependsOn), by task id: what
   * each parent's handler returned (null for nothing). Empty for a task without dependencies.
   * `R` states what the parents return when the handler knows (they are JSON, as stored):
   * `ctx.parentResults<{ pages: number }>()`; unknown otherwise.
   */
  parentResults<R = unknown>(): Promise<Record<string, R>>;
  /**
   * Report how far the task is: any JSON of at most 1024 bytes, e.g. `{ done: 40, of: 100 }` (the
   * dashboard draws a bar for `done`/`of`). Shown by `get`, `list`, the dashboard and the CLI, and
   * published as a 'progress' event. Returns at once: the newest value is written at most once a
   * second, and the last one before the attempt's outcome, fenced by the lease (a worker that lost
   * it writes nothing; the call then throws LeaseLostError). Not part of a transactional
   * handler's transaction. Throws InvalidArgumentError for a value that is not JSON or too large.
   */
  progress(value: unknown): void;
  /**
   * Append a line to the task's log (`TaskQueue.getLogs`, the dashboard's task page, the CLI's
   * `logs`). Buffered and written like progress: outside a transactional handler's transaction,
   * so the lines of an attempt that failed or rolled back are kept. A line over 2048 bytes is cut
   * (marked `…[truncated]`); a task keeps its newest 200 entries. Throws InvalidArgumentError
   * for anything but a string.
   */
  log(line: string): void;
  /**
   * The downstream said "not now": throws a RateLimitedError (write `throw ctx.coolDown(...)` or
   * let it propagate). The task goes back to pending, due in `retryAfterMs` (at least
   * MIN_COOLDOWN_MS, 250 ms), no attempt counted, no failure recorded; `scope` ('task',
   * 'partition', 'queue' or a limiter's name; default: the handler's limiter, else the queue)
   * cools down: no instance claims from it until then.
   */
  coolDown(retryAfterMs: number, options?: { scope?: CooldownScope; reason?: string }): never;
  /** @deprecated Renamed coolDown (`backoff` names the retry delay only); this name goes in the next release. */
  backOff(retryAfterMs: number, options?: { scope?: CooldownScope; reason?: string }): never;
}

/**
 * The context of a transactional handler (the default mode). `TTx` is your Prisma transaction
 * client type, e.g. `TaskContext<Prisma.TransactionClient>`.
 */
export interface TaskContext<TTx = SqlExecutor> extends TaskContextBase {
  /**
   * The Prisma transaction client. Writes made through it commit together with the task's
   * completion, or not at all.
   */
  readonly tx: TTx;
  readonly mode: 'transactional';
}

/**
 * The context of a lease-mode handler: no transaction, so no `tx`. A handler declared with
 * `@TaskHandler(queue, { mode: 'lease' })` that takes a `TaskContext` does not compile.
 */
export interface LeaseTaskContext extends TaskContextBase {
  readonly mode: 'lease';
}

/** Either context: for code shared by handlers of both modes; `ctx.mode` tells them apart. */
export type AnyTaskContext<TTx = SqlExecutor> = TaskContext<TTx> | LeaseTaskContext;

/**
 * A handler. What it returns (JSON, like a payload) is stored with the done task as its result,
 * for the tasks that depend on it (`ctx.parentResults()`) and the operator API.
 */
export type TaskHandlerFn<P = any, TTx = any> = (task: Task<P>, ctx: AnyTaskContext<TTx>) => Promise<unknown>;
