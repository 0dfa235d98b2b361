import type { Logger } from '@nestjs/common';
import type { RowLimits } from '../core/task-input';
import { NonRetryableError } from '../errors';
import type { TaskEvents } from '../observability/task-events';
import type { RegisteredHandler } from '../discovery/task-handler.registry';
import type { FailedState, Failure, GivenBack } from '../sql/statement-values';
import type { ResolvedLimiters } from '../limiter.options';
import type { ResolvedModuleOptions } from '../pg-queue.options';
import { LimitsRepository } from '../sql/limits.repository';
import type { TaskRepository } from '../sql/task.repository';
import type { PrismaClientLike, TaskEvent } from '../types';
import type { Attempt } from './attempt';
import type { ReportSink } from './attempt.reporter';
import { backoffDelayMs } from './backoff';
import type { DatabaseClock } from './database.clock';
import { errorText } from './error-text';
import type { InvokeOutcome } from './handler.invoker';
import { OwedOutcomes } from './owed.outcomes';

/** Runs the attempts of @Workflow handlers (workflow/workflow.runner.ts); null when the app has none. */
export interface WorkflowEngine {
  run(a: Attempt, handler: RegisteredHandler): Promise<InvokeOutcome | { kind: 'parked' }>;
}

/** What a queue worker and its runners share. */
export interface WorkerDeps {
  prisma: PrismaClientLike;
  repo: TaskRepository;
  /** Claims of queues with flow-control rules (see limits.sql.ts). */
  limits: LimitsRepository;
  workerId: string;
  events: TaskEvents;
  logger: Logger;
  maxErrorBytes: number;
  /** What follow-ups are checked against (the same rules as enqueue). */
  rowLimits: RowLimits;
  /** This process's estimate of the database's clock (claims feed it; notifications read it). */
  clock: DatabaseClock;
  workflows: WorkflowEngine | null;
  /** Releases and failures the database could not be told of yet (see OwedOutcomes). */
  owed?: OwedOutcomes;
  /** The module's named limiters (a RateLimitedError's scope may name one). */
  limiters: ResolvedLimiters;
}

/** What every worker of this process shares, from the module's options. */
export function workerDeps(
  options: ResolvedModuleOptions,
  shared: Pick<WorkerDeps, 'repo' | 'events' | 'logger' | 'clock' | 'rowLimits' | 'workflows'>,
): WorkerDeps {
  return {
    ...shared,
    prisma: options.prisma,
    limits: new LimitsRepository(options.schema, { partitionWeights: options.partitionWeights, limiters: options.limiters }),
    workerId: options.workerId,
    maxErrorBytes: options.maxErrorBytes,
    owed: new OwedOutcomes(shared.logger),
    limiters: options.limiters,
  };
}

/** The failure record of an attempt: fatal errors and last attempts go to dead (the SQL decides). */
export function failureOf(attempt: Attempt, error: unknown, handler: RegisteredHandler, maxErrorBytes: number): Failure {
  return {
    ...attempt.lease,
    error: errorText(error, maxErrorBytes),
    delayMs: backoffDelayMs(handler.options.backoff, attempt.task.attempt),
    fatal: error instanceof NonRetryableError,
    // Once its handler returned or was given up on (endRun); unknown for one that never ran.
    ranMs: attempt.ranUntil >= attempt.ranFrom && attempt.ranFrom > 0 ? attempt.ranUntil - attempt.ranFrom : null,
  };
}

/**
 * Gives attempts back uncounted and publishes what became of each: `released`, or `lease-lost`
 * when its lease had already been taken over (another attempt may even have finished the task).
 * `announce` false for attempts no event was published for yet (given back right after the claim).
 * When the database cannot be reached they are owed (see OwedOutcomes): given back once it answers.
 */
export async function releaseAttempts(deps: WorkerDeps, attempts: Attempt[], what: string, announce = true): Promise<void> {
  if (attempts.length === 0) return;
  try {
    const released = await deps.repo.release(deps.prisma, attempts.map((a) => a.lease));
    if (announce) publishGivenBack(deps, attempts, released);
  } catch (err) {
    deps.owed?.release(attempts.map((a) => a.lease));
    deps.logger.error(`could not release ${what} (given back once the database answers): ${(err as Error).message}`);
  }
}

/** The event that announces where a release left an attempt's task. */
const RELEASE_EVENT = { 'given-back': 'released', cancelled: 'cancelled', lost: 'lease-lost' } as const;

/** Announces where a release left each attempt's task. */
export function publishGivenBack(deps: WorkerDeps, attempts: Attempt[], released: GivenBack): void {
  for (const a of attempts) publish(deps, a, RELEASE_EVENT[released.outcomeOf(a.task.id)]);
}

export function publish(deps: WorkerDeps, attempt: Attempt, type: TaskEvent['type'], error?: string): void {
  const durationMs = attempt.startedAt ? Date.now() - attempt.startedAt : undefined;
  deps.events.count(type, attempt.task.queue, durationMs);
  if (!deps.events.observed) return;
  deps.events.publish({
    type,
    queue: attempt.task.queue,
    taskId: attempt.task.id,
    attempt: attempt.task.attempt,
    workerId: deps.workerId,
    at: new Date(),
    durationMs,
    error,
  });
}

/** Where a finished attempt left its task. */
export type Outcome = 'done' | 'rerun' | 'cancelled' | FailedState | 'backed-off' | 'lost';

const EVENT_OF: Record<Outcome, TaskEvent['type']> = {
  done: 'completed',
  rerun: 'completed',
  cancelled: 'cancelled',
  pending: 'failed',
  dead: 'dead',
  'backed-off': 'backed-off',
  lost: 'lease-lost',
};

export function publishOutcome(deps: WorkerDeps, attempt: Attempt, outcome: Outcome, error?: string): void {
  publish(deps, attempt, EVENT_OF[outcome], error);
}

/** Where the attempts' ctx.progress and ctx.log go: the task row, through the app's client (see AttemptReporter). */
export function reportSink(deps: WorkerDeps): ReportSink {
  return {
    write: (lease, progress, entries) => deps.repo.reports.report(deps.prisma, lease, progress, entries),
    written: (attempt, progress) => {
      if (!deps.events.observed) return;
      const { queue, id, attempt: n } = attempt.task;
      deps.events.publish({ type: 'progress', queue, taskId: id, attempt: n, workerId: deps.workerId, at: new Date(), progress });
    },
    warn: (message) => deps.logger.warn(message),
    now: () => deps.clock.now(),
  };
}
