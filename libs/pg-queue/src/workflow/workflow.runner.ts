import type { Logger } from '@nestjs/common';
import { DatabaseUnavailableError, TaskCancelledError } from '../errors';
import { isDatabaseUnavailable, isLockTimeout } from '../sql/database-error';
import type { RegisteredHandler } from '../discovery/task-handler.registry';
import type { Attempt } from '../worker/attempt';
import { invokeTraced, type InvokeOutcome } from '../worker/handler.invoker';
import type { WorkflowEngine } from '../worker/worker.deps';
import { ReplayCursor, type JournalEntry } from './journal';
import { JournalLoader } from './journal.loader';
import { PARKED, WorkflowRun, type WorkflowRunDeps } from './workflow.context';
import type { ParkRequest } from '../sql/workflow.repository';

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
      return this.givenBack(error);
    }
    if (journal.some((e) => (e.kind as string) === 'cancel')) return { kind: 'aborted', reason: new TaskCancelledError(a.task.id), settled: Promise.resolve() };
    const run = new WorkflowRun(a, new ReplayCursor(a.task.id, journal), this.deps);
    const method = handler.handle as unknown as (input: unknown, wf: WorkflowRun) => unknown;
    // The timeout bounds the whole attempt: the method, and then the calls still under way (a
    // Promise.all that a park or an error ended waits for its other calls to record first).
    const thrown: { error?: unknown; did: boolean } = { did: false };
    let outcome = await invokeTraced(a, 'lease', handler.options.timeoutMs, async () => {
      const returned = Promise.resolve().then(() => method(a.task.payload, run));
      returned.catch((error: unknown) => Object.assign(thrown, { error, did: true }));
      try {
        return await Promise.race([returned, run.parked]);
      } finally {
        await run.settled();
        await new Promise(setImmediate); // a rejection of the method that those calls caused reaches it
      }
    });
    if (outcome.kind === 'aborted') return outcome;
    // A call parked, and another's error then ended the method (Promise.all): the attempt failed. Its
    // error must be forgotten, not replayed by every later attempt.
    if (outcome.kind === 'ok' && outcome.value === PARKED && thrown.did) outcome = { kind: 'error', error: thrown.error };
    if (run.fatal) return { kind: 'error', error: run.fatal }; // even if the code caught it and went on
    if (outcome.kind === 'ok' && outcome.value === PARKED) return this.park(a, run, { ...run.park!, keep: !run.failedWhileParking });
    if (outcome.kind === 'ok') {
      try {
        run.cursor.assertConsumed();
      } catch (error) {
        return { kind: 'error', error };
      }
      return outcome;
    }
    // The attempt failed: what it (or an earlier attempt that did not park) journaled tentatively
    // is forgotten, so the next attempt runs those calls again (see WorkflowRun.failing).
    if (run.failing) {
      try {
        await this.deps.repo.forgetTentative(this.deps.prisma, a.lease);
      } catch (err) {
        return this.givenBack(err); // the next attempt would replay this one's failure: not counted
      }
    }
    return outcome;
  }

  /** A statement of the attempt's own failed: the attempt is given back uncounted when the database was unavailable, else failed. */
  private givenBack(err: unknown): InvokeOutcome {
    if (!isDatabaseUnavailable(err)) return { kind: 'error', error: err };
    return { kind: 'aborted', reason: DatabaseUnavailableError.under("a workflow's statement", err), settled: Promise.resolve() };
  }

  private async park(a: Attempt, run: WorkflowRun, request: ParkRequest): Promise<InvokeOutcome | { kind: 'parked' }> {
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
        // Given back uncounted (or owed so, while the database cannot be reached): the replay parks again.
        this.logger.warn(`workflow ${a.task.id} of "${a.task.queue}" could not park: ${(err as Error).message}`);
        return this.givenBack(err);
      }
    }
  }
}
