import { HandlerConfigurationError, PgQueueError } from '../errors';
import { buildTaskRow } from '../client/task-input';
import type { FollowUpOptions, HandlerMode, TaskContext } from '../types';
import type { Attempt } from './attempt';

export interface ContextDeps {
  mode: HandlerMode;
  workerId: string;
  rowDefaults: Parameters<typeof buildTaskRow>[3];
  /** Transactional mode: the gated transaction client (built on first use). */
  tx?: () => unknown;
  heartbeat: () => Promise<void>;
}

/** Builds the `ctx` a handler receives for one attempt. */
export function createTaskContext(attempt: Attempt, deps: ContextDeps): TaskContext<any> {
  return {
    get tx() {
      if (deps.tx === undefined) {
        throw new HandlerConfigurationError(`pg-queue: ctx.tx is only available to transactional handlers (queue "${attempt.task.queue}" runs in lease mode)`);
      }
      return deps.tx();
    },
    async enqueue<P>(queue: string, payload: P, options?: FollowUpOptions): Promise<void> {
      if (attempt.finished) {
        throw new PgQueueError(`pg-queue: ctx.enqueue called after task ${attempt.task.id}'s handler returned`);
      }
      attempt.followUps.push(buildTaskRow(queue, payload, options, deps.rowDefaults, attempt.task.id));
    },
    heartbeat: deps.heartbeat,
    get signal() {
      return attempt.signal;
    },
    workerId: deps.workerId,
    mode: deps.mode,
  };
}
