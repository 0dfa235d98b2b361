import type { Logger } from '@nestjs/common';
import type { DependencySettler } from './dependency.settler';
import type { InstanceLiveness } from './instance.liveness';
import type { OwedOutcomes } from './owed.outcomes';
import type { SettleScope } from '../sql/dependencies.repository';
import type { LivenessRepository } from '../sql/liveness.repository';
import type { TaskRepository } from '../sql/task.repository';
import type { SqlExecutor } from '../types';
import { PeriodicPass } from './periodic.pass';

/** How long after an instance's window ends the rescuer looks again (the window is measured by the database's clock). */
const GRACE_SLACK_MS = 100;

/** What the rescuer needs to take back the claims of instances that died (see liveness.sql.ts). */
export interface GoneInstances {
  repo: LivenessRepository;
  /** This instance: never judged by its own rescuer. */
  self: string;
  /** This instance's own record (null: it never registers, e.g. without databaseUrl). */
  own: InstanceLiveness | null;
  listening: () => boolean;
  /** What this instance owes the database (see OwedOutcomes): written on every pass. */
  owed?: OwedOutcomes;
}

/**
 * Periodically returns tasks with expired leases to the queue (or to `dead` after their last
 * attempt), and those of instances taken for dead, their LISTEN session gone past their window (see
 * liveness.sql.ts): when one is found gone, the next pass comes as soon as its window ends rather
 * than an interval later. Every instance runs it; SKIP LOCKED keeps them from contending, and rows
 * held by a live transactional handler are locked, hence skipped.
 */
export class LeaseRescuer {
  private readonly loop: PeriodicPass;
  /** The last failure of rescueGoneOnce, until a pass succeeds. */
  private goneFailure: string | null = null;

  constructor(
    private readonly db: SqlExecutor,
    private readonly repo: TaskRepository,
    intervalMs: number,
    private readonly logger: Logger,
    /** Settles dependency debts each round (see DependencySettler). */
    private readonly settler: DependencySettler | null = null,
    private readonly gone: GoneInstances | null = null,
  ) {
    this.loop = new PeriodicPass(() => this.runPass(), () => intervalMs, 0.2, (err) => this.logger.error(`lease rescuer pass failed: ${(err as Error).message}`));
  }

  /** The first pass in about the interval. */
  start(): void {
    this.loop.schedule();
  }

  /** Starts no pass after this; resolves once the pass under way (if any) ended. */
  stop(): Promise<void> {
    return this.loop.stop();
  }

  /** A rescue, then a settling round; comes back as soon as an instance found gone may be judged. */
  private async runPass(): Promise<number | null> {
    const { owed } = await this.rescueOnce();
    const nextCheckMs = await this.rescueGoneOnce();
    if (this.loop.isStopped) return null; // a round now would outlive shutdown
    if (owed.fanIn || owed.children || owed.sweep) await this.settler?.request(owed);
    return nextCheckMs === null ? null : Math.max(0, nextCheckMs) + GRACE_SLACK_MS;
  }

  /**
   * Registers this instance if it still has to, then takes back the claims of dead instances;
   * returns when an instance found gone may be judged (null: none is).
   */
  async rescueGoneOnce(): Promise<number | null> {
    if (!this.gone) return null;
    await this.gone.owed?.settle(this.db, this.repo);
    await this.gone.own?.ensure(this.gone.listening());
    try {
      const res = await this.gone.repo.rescueGone(this.db, this.gone.self, this.gone.own?.trusted() ?? false);
      this.goneFailure = null;
      if (res.rescued > 0) {
        this.logger.warn(`rescued ${res.rescued} task(s) of ${res.gone} instance(s) whose database session is gone (${res.dead} now dead)`);
        return 0; // more may be left past the batch limit
      }
      return res.nextCheckMs;
    } catch (err) {
      // Once per cause while it lasts: a schema not upgraded yet would say so on every pass.
      const message = (err as Error).message;
      if (message !== this.goneFailure) this.logger.error(`rescue of dead instances' tasks failed: ${message}`);
      this.goneFailure = message;
      return null;
    }
  }

  /** One rescue of expired leases; `owed`: what the settler has to do (everything, when the probe failed). */
  async rescueOnce(): Promise<{ rescued: number; dead: number; owed: SettleScope }> {
    try {
      const res = await this.repo.rescuePass(this.db);
      if (res.rescued > 0) this.logger.warn(`rescued ${res.rescued} task(s) with expired leases (${res.dead} now dead)`);
      return res;
    } catch (err) {
      this.logger.error(`lease rescue failed: ${(err as Error).message}`);
      return { rescued: 0, dead: 0, owed: { fanIn: true, children: true, sweep: true } };
    }
  }
}
