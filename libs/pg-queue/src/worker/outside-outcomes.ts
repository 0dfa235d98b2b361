import type { RegisteredHandler } from '../discovery/task-handler.registry';
import type { BackOff, Failure, GivenBack } from '../sql/statement-values';
import type { Attempt } from './attempt';
import { backOffOutcome } from './completion.batcher';
import { publishOutcome, type Outcome, type WorkerDeps } from './worker.deps';

/**
 * Outcomes of transactional attempts whose transaction did not commit (transactional.runner.ts,
 * recover), written on their own, each statement committing by itself. A database that does not
 * answer, or a row a business transaction holds, leaves them owed (OwedOutcomes), not lost.
 */
export class OutsideOutcomes {
  constructor(
    private readonly deps: WorkerDeps,
    private readonly handler: RegisteredHandler,
    /** Asks the worker to look for due tasks again in `ms`. */
    private readonly wakeIn: (ms: number) => void,
  ) {}

  /** Records failed attempts; null when the database could not be reached (then owed). */
  async fail(failures: Failure[]): Promise<Map<string, Outcome> | null> {
    try {
      return await this.deps.repo.fail(this.deps.prisma, failures, this.handler.options.retryBlocksGroup);
    } catch (err) {
      // Written once it answers again (see OwedOutcomes), else the leases expire and the rescuer retries the tasks.
      this.deps.owed?.fail(failures, this.handler.options.retryBlocksGroup);
      this.deps.logger.error(`could not record failed attempts (recorded once the database answers): ${(err as Error).message}`);
      return null;
    }
  }

  /** Publishes what `fail` made of each attempt: a failure that matched no row means the lease had already been taken over. */
  announceFailures(attempts: Attempt[], states: Map<string, Outcome> | null, error: string): void {
    for (const a of attempts) publishOutcome(this.deps, a, states === null ? 'pending' : states.get(a.task.id) ?? 'lost', error);
  }

  /** Writes back-offs, each due at its end, and publishes their outcomes. */
  async backOff(backedOff: [Attempt, BackOff][]): Promise<void> {
    if (backedOff.length === 0) return;
    const backOffs = backedOff.map(([, b]) => b);
    const held = new Set<string>();
    let released: GivenBack | null = null;
    try {
      released = await this.deps.repo.backOff(this.deps.prisma, backOffs, held);
    } catch (err) {
      this.deps.logger.error(`could not record back-offs (recorded once the database answers): ${(err as Error).message}`);
    }
    const owed = backOffs.filter((b) => released === null || held.has(b.id));
    if (owed.length > 0) this.deps.owed?.backOff(owed);
    for (const [a, b] of backedOff) {
      const outcome: Outcome = released === null || owed.includes(b) ? 'backed-off' : backOffOutcome(released, b.id);
      publishOutcome(this.deps, a, outcome);
      if (outcome === 'backed-off') this.wakeIn(this.deps.clock.msUntil(b.untilMs));
    }
  }
}
