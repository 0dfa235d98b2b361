import { HandlerConfigurationError, PgQueueError } from '../errors';
import { buildTaskRow } from '../client/task-input';
import type { FollowUpOptions, HandlerMode, TaskContext } from '../types';
import type { Attempt } from './attempt';
import type { TransactionGate } from './transaction.gate';

/** What every context of one runner shares. */
export interface ContextScope {
  mode: HandlerMode;
  workerId: string;
  rowDefaults: Parameters<typeof buildTaskRow>[3];
  /** `ctx.heartbeat()` of an attempt. */
  heartbeat(attempt: Attempt): Promise<void>;
}

/**
 * The `ctx` a handler receives. One is built per attempt, so it is a small object whose getters
 * live on the prototype: an object literal with getters and closures cost several allocations per
 * task. `const { enqueue, tx } = ctx` works as with a plain object.
 */
export class AttemptContext implements TaskContext<any> {
  private boundEnqueue: TaskContext['enqueue'] | null = null;
  private boundHeartbeat: TaskContext['heartbeat'] | null = null;

  constructor(
    private readonly attempt: Attempt,
    private readonly scope: ContextScope,
    /** Transactional mode: this task's part of the batch transaction. */
    private readonly gate: TransactionGate | null,
  ) {}

  /** Bound on first use (most handlers never enqueue), so it also works detached from `ctx`. */
  get enqueue(): TaskContext['enqueue'] {
    return (this.boundEnqueue ??= enqueueFollowUp.bind(null, this.attempt, this.scope) as TaskContext['enqueue']);
  }

  get heartbeat(): TaskContext['heartbeat'] {
    return (this.boundHeartbeat ??= this.scope.heartbeat.bind(this.scope, this.attempt));
  }

  get tx(): any {
    if (this.gate === null) {
      throw new HandlerConfigurationError(`pg-queue: ctx.tx is only available to transactional handlers (queue "${this.attempt.task.queue}" runs in lease mode)`);
    }
    return this.gate.client();
  }

  get signal(): AbortSignal {
    return this.attempt.signal;
  }

  get workerId(): string {
    return this.scope.workerId;
  }

  get mode(): HandlerMode {
    return this.scope.mode;
  }
}

async function enqueueFollowUp(attempt: Attempt, scope: ContextScope, queue: string, payload: unknown, options?: FollowUpOptions): Promise<void> {
  if (attempt.finished) {
    throw new PgQueueError(`pg-queue: ctx.enqueue called after task ${attempt.task.id}'s handler returned`);
  }
  attempt.followUps.push(buildTaskRow(queue, payload, options, scope.rowDefaults, attempt.task.id));
}
