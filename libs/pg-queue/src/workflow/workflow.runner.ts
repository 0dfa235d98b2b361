import type { Logger } from '@nestjs/common';
import { TaskCancelledError } from '../errors';
import { isLockTimeout } from '../sql/database-error';
import type { RegisteredHandler } from '../discovery/task-handler.registry';
import type { Attempt } from '../worker/attempt';
import { invokeTraced, type InvokeOutcome } from '../worker/handler.invoker';
import type { WorkflowEngine } from '../worker/worker.deps';
import { ReplayCursor, type JournalEntry } from './journal';
import { JournalLoader } from './journal.loader';
import { PARKED, WorkflowRun, type WorkflowRunDeps } from './workflow.context';

/** Pause before a park whose row was held is tried again. */
const PARK_RETRY_MS = 500;

/**
 * Runs one attempt of a workflow (a lease-mode task whose handler is a `@Workflow` method): loads
 * its journal (one read for all the attempts that start together, see JournalLoader), calls the
 * method with the input and a WorkflowRun, and turns how the attempt ended into an outcome for the
 * lease runner. A park is recorded here (fenced, like a
 * completion); a return or a failure is left to the lease runner, as for any task.
 */
export class WorkflowRunner implements WorkflowEngine {
  private readonly journals: JournalLoader;

  constructor(
    private readonly deps: WorkflowRunDeps,
    private readonly logger: Logger,
    /** Tells this process's waker of a parked workflow's wake time. */
    private readonly wakeAt: (epochMs: number) => void,
  ) {
    this.journals = new JournalLoader((ids) => deps.repo.journals(deps.prisma, ids));
  }

  async run(a: Attempt, handler: RegisteredHandler): Promise<InvokeOutcome | { kind: 'parked' }> {
    let journal: JournalEntry[];
    try {
      journal = (await this.journals.journal(a.task.id)) as JournalEntry[];
    } catch (error) {
      return { kind: 'error', error };
    }
    const run = new WorkflowRun(a, new ReplayCursor(a.task.id, journal), this.deps);
    const method = handler.handle as unknown as (input: unknown, wf: WorkflowRun) => unknown;
    const outcome = await invokeTraced(a, 'lease', handler.options.timeoutMs, () => Promise.race([Promise.resolve(method(a.task.payload, run)), run.parked]));
    if (outcome.kind === 'aborted') return outcome;
    await run.settled(); // calls still under way (a Promise.all that a park or an error ended) record first
    if (a.aborted) return { kind: 'aborted', reason: a.abortReason, settled: Promise.resolve() };
    if (run.fatal) return { kind: 'error', error: run.fatal }; // even if the code caught it and went on
    if (outcome.kind === 'ok' && outcome.value === PARKED) return this.park(a, run);
    if (outcome.kind === 'ok') {
      try {
        run.cursor.assertConsumed();
      } catch (error) {
        return { kind: 'error', error };
      }
      return outcome;
    }
    const failed = run.failedCall(outcome.error);
    try {
      if (failed !== null) await this.deps.repo.forgetFailure(this.deps.prisma, a.lease, failed);
    } catch (err) {
      this.logger.warn(`workflow ${a.task.id}: could not clear its failed call from the journal: ${(err as Error).message}`);
    }
    return outcome;
  }

  private async park(a: Attempt, run: WorkflowRun): Promise<InvokeOutcome | { kind: 'parked' }> {
    const request = run.park!;
    for (;;) {
      try {
        const state = await this.deps.repo.park(this.deps.prisma, a.lease, request);
        // No row: the lease was lost, or a cancel request waits; recorded as for any attempt.
        if (state === null) return { kind: 'aborted', reason: new TaskCancelledError(a.task.id), settled: Promise.resolve() };
        if (state === 'waiting' && request.wakeAt !== null) this.wakeAt(request.wakeAt);
        return { kind: 'parked' };
      } catch (err) {
        // A business transaction holds the row (see rowLockBound): the attempt, its lease kept by
        // heartbeats, parks once the row is free.
        if (isLockTimeout(err) && !a.aborted) {
          await new Promise((r) => setTimeout(r, PARK_RETRY_MS));
          continue;
        }
        // The lease expires and the rescuer gives the task back: the replay parks again.
        this.logger.error(`workflow ${a.task.id} of "${a.task.queue}" could not park: ${(err as Error).message}`);
        return { kind: 'parked' };
      }
    }
  }
}
