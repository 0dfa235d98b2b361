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

/** Module options that cannot work (bad schema name, negative timeout, ...). Thrown at startup. */
export class InvalidOptionsError extends PgQueueError {
  constructor(
    readonly option: string,
    reason: string,
  ) {
    super(`pg-queue: invalid option "${option}": ${reason}`);
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

/** An argument of an operator call (id, filter, limit) that cannot be right. */
export class InvalidArgumentError extends PgQueueError {
  constructor(
    readonly argument: string,
    reason: string,
  ) {
    super(`pg-queue: invalid argument "${argument}": ${reason}`);
  }
}

/** Two `@TaskHandler` methods for one queue in one application, or a handler with bad options. */
export class HandlerConfigurationError extends PgQueueError {}

/**
 * Thrown by a handler to skip the remaining attempts: the task goes straight to `dead`
 * (kept for inspection and a manual retry).
 */
export class NonRetryableError extends PgQueueError {}

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

/** The worker is shutting down and abandoned this attempt; the task is released, not counted. */
export class ShutdownAbortError extends PgQueueError {
  constructor() {
    super('pg-queue: worker is shutting down');
  }
}

/**
 * A schedule declaration (module option `schedules[i]` or a handler's `schedule`) that cannot work;
 * a startup error. `where` names the declaration, `option` its field at fault.
 */
export class InvalidScheduleError extends HandlerConfigurationError {
  constructor(
    readonly where: string,
    readonly option: string,
    reason: string,
  ) {
    super(`pg-queue: ${where}: invalid schedule: option "${option}": ${reason}`);
  }
}
