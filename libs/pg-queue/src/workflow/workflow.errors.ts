import { NonRetryableError, PgQueueError } from '../errors';

/**
 * The workflow's code no longer matches its journal: the journal has another kind of call under a
 * name the code called, or the code returned without a call the journal has (code changed under a
 * running workflow, or a call that depends on something outside a step). Fatal: the workflow ends dead, to be retried with
 * `retry(id)` once the code is fixed (or branched with `wf.patched`).
 */
export class WorkflowReplayError extends NonRetryableError {
  constructor(
    readonly taskId: string,
    /** The call's position, from 1. */
    readonly position: number,
    readonly recorded: string,
    readonly called: string,
  ) {
    super(`pg-queue: workflow ${taskId} cannot replay its journal: at call ${position} the journal has ${recorded}, the code ${called}. ` +
      'Changed code needs wf.patched(), and anything that varies (time, randomness, I/O) belongs inside a step');
  }
}

/** A child started with `wf.child` ended dead or cancelled; catch it to compensate. */
export class ChildWorkflowError extends PgQueueError {
  constructor(
    readonly childId: string,
    readonly queue: string,
    readonly state: string,
  ) {
    super(`pg-queue: child task ${childId} of queue "${queue}" ended ${state}`);
  }
}

/** `signal()` to a task that does not exist or has finished (done or cancelled). */
export class SignalTargetError extends PgQueueError {
  constructor(
    readonly taskId: string,
    readonly reason: 'unknown' | 'finished',
  ) {
    super(reason === 'unknown' ? `pg-queue: cannot signal task ${taskId}: there is no such task` : `pg-queue: cannot signal task ${taskId}: it has finished`);
  }
}

/**
 * A step's error as its journal entry replays it: the original error's name and message (its
 * class is not kept). `instanceof` the original class holds only on the run that threw it.
 */
export class StepFailedError extends PgQueueError {
  constructor(
    readonly step: string,
    readonly originalName: string,
    message: string,
  ) {
    super(message);
    this.name = originalName;
  }
}

/** A workflow's code breaks a rule of the journal (a step name used twice in one run). Fatal. */
export class WorkflowDefinitionError extends NonRetryableError {}

/** A step's run took longer than its `timeoutMs` (the function itself is not stopped). */
export class StepTimeoutError extends PgQueueError {
  constructor(readonly timeoutMs: number) {
    super(`pg-queue: step timed out after ${timeoutMs} ms`);
  }
}
