/**
 * Every error the library throws on purpose is a {@link PgQueueError}, so callers can tell queue
 * problems from their own. Bad input gets a subclass that names the field at fault.
 */
export class PgQueueError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/**
 * Configuration that cannot work, wherever it is given: module options (with `handlerDefaults`,
 * `queues` and `schedules`), `@TaskHandler` options and schedules. Thrown at startup, before the
 * queue touches the database. `option` is the value's full path, as you would write it:
 * `pollIntervalMs`, `handlerDefaults.backoff.type`, `queues["mail.send"].concurrency`,
 * `schedules[1].cron`, `@TaskHandler("mail.send").timeoutMs`; `where` names the handler method when
 * the path alone does not. Catch this class for every configuration mistake; the subclasses
 * {@link HandlerConfigurationError} and {@link InvalidScheduleError} narrow it down.
 */
export class InvalidOptionsError extends PgQueueError {
  constructor(
    readonly option: string,
    reason: string,
    readonly where?: string,
  ) {
    super(`pg-queue: invalid option ${option}${where ? ` (${where})` : ''}: ${reason}`);
  }
}

/** A queue name that is empty, too long or has characters outside [A-Za-z0-9_.:-]. */
export class InvalidQueueNameError extends PgQueueError {
  constructor(readonly queue: unknown) {
    super(`pg-queue: invalid queue name ${JSON.stringify(queue)}: use 1-128 characters from [A-Za-z0-9_.:-]`);
  }
}

/** A payload that JSON cannot carry faithfully (functions, BigInt, cycles, undefined at the top). */
export class InvalidPayloadError extends PgQueueError {
  constructor(
    readonly queue: string,
    reason: string,
  ) {
    super(`pg-queue: payload for "${queue}" is not JSON-serialisable: ${reason}`);
  }
}

/** A payload whose JSON is larger than the configured `maxPayloadBytes`. */
export class PayloadTooLargeError extends PgQueueError {
  constructor(
    readonly queue: string,
    readonly bytes: number,
    readonly limit: number,
  ) {
    super(`pg-queue: payload for "${queue}" is ${bytes} bytes, over the ${limit}-byte limit (maxPayloadBytes)`);
  }
}

/** Enqueue options out of range (negative delay, invalid date, non-integer priority, ...). */
export class InvalidEnqueueOptionsError extends PgQueueError {
  constructor(
    readonly option: string,
    reason: string,
  ) {
    super(`pg-queue: invalid enqueue option "${option}": ${reason}`);
  }
}

/** `dependsOn` names tasks that exist neither live nor in the archive (nothing was written). */
export class DependencyNotFoundError extends InvalidEnqueueOptionsError {
  constructor(readonly ids: string[]) {
    super('dependsOn', `no task with id ${ids.join(', ')}`);
  }
}

/**
 * `retry(id)` of a cancelled dependant (`dependsOn`) that lacks the results of `parents`: they had
 * not ended done when it was cancelled (a parent died or was cancelled), so its
 * `ctx.parentResults()` would miss them. Nothing changed; retry the parents if need be, then
 * enqueue a new task with the same `dependsOn` (it reads done parents' results from the archive).
 */
export class DependenciesNotDoneError extends PgQueueError {
  constructor(
    readonly taskId: string,
    readonly parents: string[],
  ) {
    super(
      `pg-queue: task ${taskId} cannot be retried: task ${parents.join(', ')}, which it depends on, had not ended done when it was cancelled, ` +
        'so it lacks their results; enqueue a new task with the same dependsOn instead',
    );
  }
}

/** An argument of an operator call (id, filter, limit) that cannot be right. */
export class InvalidArgumentError extends PgQueueError {
  constructor(
    readonly argument: string,
    reason: string,
  ) {
    super(`pg-queue: invalid argument "${argument}": ${reason}`);
  }
}

/**
 * A handler's settings that cannot work (given in `@TaskHandler`, `handlerDefaults` or `queues`), or
 * two `@TaskHandler` methods for one queue in one application.
 */
export class HandlerConfigurationError extends InvalidOptionsError {}

/**
 * Thrown by a handler to skip the remaining attempts: the task goes straight to `dead`
 * (kept for inspection and a manual retry).
 */
export class NonRetryableError extends PgQueueError {}

/**
 * What a cooldown holds back (see RateLimitedError): this task only, its partition, its whole
 * queue, or a named limiter (module option `limiters`) with every queue that uses it. A cooldown is
 * the pause a downstream asked for; `backoff` is only ever the delay between failed attempts.
 */
export type CooldownScope = 'task' | 'partition' | 'queue' | (string & {});
/** @deprecated Renamed CooldownScope; this name goes in the next release. */
export type BackOffScopeName = CooldownScope;

/** The most a cooldown may last: 366 days, as a rate window. */
export const MAX_COOLDOWN_MS = 31_622_400_000;
/** @deprecated Renamed MAX_COOLDOWN_MS; this name goes in the next release. */
export const MAX_BACK_OFF_MS = MAX_COOLDOWN_MS;

/**
 * The least a cooldown lasts: a shorter one (a `Retry-After: 0`) is raised to it. A cooldown gives
 * its attempt back uncounted, so a downstream that answers "not now, retry at once" for ever would
 * otherwise make claim, cooldown, claim a busy loop that never ends dead. 250 ms caps that loop at
 * four claims a second per task (per queue, partition or limiter for the wider scopes), and is
 * short enough that a cooldown computed to the millisecond (a rate-limit reset time) is not pushed
 * noticeably past the window it waits for.
 */
export const MIN_COOLDOWN_MS = 250;
/** @deprecated Renamed MIN_COOLDOWN_MS; this name goes in the next release. */
export const MIN_BACK_OFF_MS = MIN_COOLDOWN_MS;

/**
 * Thrown by a handler whose downstream said "not now" (an HTTP 429 with `Retry-After`, a quota):
 * the task goes back to `pending`, due in `retryAfterMs` (at least MIN_COOLDOWN_MS), with no attempt
 * counted and nothing recorded as a failure; and its scope cools down: it is not claimed by any
 * instance until then (see the README's flow control). `scope` defaults to the handler's limiter
 * when it has one, else 'queue'. In transactional mode the handler's writes are rolled back.
 * `ctx.coolDown(ms, { scope })` throws it.
 * @example
 * if (res.status === 429) throw new RateLimitedError({ retryAfterMs: RateLimitedError.retryAfterMs(res.headers.get('retry-after')) ?? 1000, scope: 'stripe' });
 */
export class RateLimitedError extends PgQueueError {
  readonly retryAfterMs: number;
  readonly scope: CooldownScope | undefined;

  constructor(options: { retryAfterMs: number; scope?: CooldownScope; reason?: string }) {
    const ms = options?.retryAfterMs;
    if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0 || ms > MAX_COOLDOWN_MS) {
      throw new InvalidArgumentError('retryAfterMs', `expected a number of ms in [0, ${MAX_COOLDOWN_MS}], got ${JSON.stringify(ms)}`);
    }
    const scope = options.scope;
    if (scope !== undefined && (typeof scope !== 'string' || scope.length === 0 || scope.length > 200)) {
      throw new InvalidArgumentError('scope', `expected 'task', 'partition', 'queue' or a limiter's name, got ${JSON.stringify(scope)}`);
    }
    const lasting = Math.max(MIN_COOLDOWN_MS, Math.round(ms));
    super(options.reason ?? `pg-queue: rate limited, back off ${lasting} ms${scope ? ` (${scope})` : ''}`);
    this.retryAfterMs = lasting;
    this.scope = scope;
  }

  /**
   * An HTTP `Retry-After` value (seconds, or an HTTP date) in ms from now; null when absent or
   * unreadable.
   */
  static retryAfterMs(header: string | null | undefined, now = Date.now()): number | null {
    if (header == null || header.trim() === '') return null;
    const seconds = Number(header);
    if (Number.isFinite(seconds)) return Math.max(0, Math.min(MAX_COOLDOWN_MS, Math.round(seconds * 1000)));
    const at = Date.parse(header);
    return Number.isNaN(at) ? null : Math.max(0, Math.min(MAX_COOLDOWN_MS, at - now));
  }
}

/** A handler returned a value that cannot be stored as its result (not JSON, or too large): the task ends dead. */
export class InvalidResultError extends NonRetryableError {
  constructor(taskId: string, queue: string, reason: string) {
    super(`pg-queue: the value task ${taskId}'s handler returned cannot be stored as its result (queue "${queue}"): ${reason}`);
  }
}

/**
 * This worker no longer holds the task's lease (it expired and another worker claimed the task,
 * or the task was cancelled). Nothing this worker does for the task is committed any more.
 */
export class LeaseLostError extends PgQueueError {
  constructor(readonly taskId: string) {
    super(`pg-queue: lease lost for task ${taskId}: it expired or the task was taken over`);
  }
}

/** The handler ran past its `timeoutMs`; recorded as a failed attempt and retried with backoff. */
export class TaskTimeoutError extends PgQueueError {
  constructor(
    readonly taskId: string,
    readonly timeoutMs: number,
  ) {
    super(`pg-queue: task ${taskId} timed out after ${timeoutMs} ms`);
  }
}

/** The task was cancelled while its handler ran (`TaskQueue.cancel`); the attempt is abandoned. */
export class TaskCancelledError extends PgQueueError {
  constructor(readonly taskId: string) {
    super(`pg-queue: task ${taskId} was cancelled`);
  }
}

/**
 * The sandbox (worker thread or child process, see `@TaskHandler`'s `sandbox`) running a task ended
 * before the task did: an uncaught exception, `process.exit`, a signal, running out of memory. Only
 * that attempt fails (retried with backoff as any failure); the sandbox is replaced.
 */
export class SandboxCrashedError extends PgQueueError {
  constructor(
    readonly taskId: string,
    readonly queue: string,
    readonly reason: string,
  ) {
    super(`pg-queue: the sandbox running task ${taskId} of "${queue}" ended before the task did: ${reason}`);
  }
}

/** The worker is shutting down and abandoned this attempt; the task is released, not counted. */
export class ShutdownAbortError extends PgQueueError {
  constructor() {
    super('pg-queue: worker is shutting down');
  }
}

/**
 * An attempt could not go on because the database failed under the queue's own statements (a
 * workflow's journal write, a park): unreachable, restarting, or busy (a pool with no connection
 * free, a statement timeout). Not the task's failure: the task is given back uncounted.
 */
export class DatabaseUnavailableError extends PgQueueError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message);
    if (options) this.cause = options.cause;
  }

  /** The error for `cause`, a failure of the database under `what` (e.g. "workflow 12's journal"). */
  static under(what: string, cause: unknown): DatabaseUnavailableError {
    return new DatabaseUnavailableError(`pg-queue: the database failed under ${what} (given back uncounted): ${(cause as Error)?.message ?? String(cause)}`, { cause });
  }
}

/** A schedule declaration (module option `schedules[i]` or a handler's `schedule`) that cannot work. */
export class InvalidScheduleError extends InvalidOptionsError {}

/**
 * Schedule names are one namespace for declared and runtime schedules, and a name is owned by the
 * side that took it first: neither silently overwrites the other (an operator's schedule lost at
 * the next deploy, or a declared one changed behind the code's back). `heldBy` says who holds it:
 * `'code'` when upsertSchedule/removeSchedule named a declared schedule, `'runtime'` when a startup
 * declares a schedule whose name a runtime schedule holds (that startup fails).
 */
export class ScheduleNameTakenError extends PgQueueError {
  constructor(
    readonly scheduleName: string,
    readonly heldBy: 'code' | 'runtime',
  ) {
    super(
      heldBy === 'code'
        ? `pg-queue: schedule ${JSON.stringify(scheduleName)} is declared in code; change it there, or give the runtime schedule another name`
        : `pg-queue: schedule ${JSON.stringify(scheduleName)} was created at run time (upsertSchedule); remove it (removeSchedule, \`pg-queue schedules remove\`) or give the declared schedule another name`,
    );
  }
}

/** `waitFor(id)`: the task ended dead or cancelled; `lastError` is its last error (null if none). */
export class TaskFailedError extends PgQueueError {
  constructor(
    readonly taskId: string,
    readonly state: 'dead' | 'cancelled',
    readonly lastError: string | null,
  ) {
    super(`pg-queue: task ${taskId} ended ${state}${lastError ? `: ${lastError}` : ''}`);
  }
}

/** `waitFor(id)`: the task had not ended within `timeoutMs` (it goes on; only the wait ended). */
export class WaitForTimeoutError extends PgQueueError {
  constructor(
    readonly taskId: string,
    readonly timeoutMs: number,
  ) {
    super(`pg-queue: task ${taskId} did not end within ${timeoutMs} ms`);
  }
}

/**
 * `waitFor(id)`: no task with that id, live or archived (never enqueued, purged, or finished
 * under `finished: 'delete'`, which keeps no result).
 */
export class TaskNotFoundError extends PgQueueError {
  constructor(readonly taskId: string) {
    super(`pg-queue: no task ${taskId}`);
  }
}
