import type { Logger } from '@nestjs/common';
import type { DependencySettler } from './dependency.settler';
import type { InstanceLiveness } from './instance.liveness';
import type { OwedOutcomes } from './owed.outcomes';
import type { LivenessRepository } from '../sql/liveness.repository';
import type { TaskRepository } from '../sql/task.repository';
import type { SqlExecutor } from '../types';

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
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  /** The pass under way (its rescue, then its settling round); stop() waits for it. */
  private pass: Promise<void> | null = null;
  /** The last failure of rescueGoneOnce, until a pass succeeds. */
  private goneFailure: string | null = null;

  constructor(
    private readonly db: SqlExecutor,
    private readonly repo: TaskRepository,
    private readonly intervalMs: number,
    private readonly logger: Logger,
    /** Settles dependency debts each round (see DependencySettler). */
    private readonly settler: DependencySettler | null = null,
    private readonly gone: GoneInstances | null = null,
  ) {}

  /** The next pass in about intervalMs, or in `soonerMs` if that is sooner. */
  start(soonerMs: number | null = null): void {
    if (this.stopped) return;
    const interval = this.intervalMs * (0.8 + Math.random() * 0.4);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.pass = this.runPass().finally(() => (this.pass = null));
    }, soonerMs === null ? interval : Math.min(interval, Math.max(0, soonerMs) + GRACE_SLACK_MS));
    this.timer.unref();
  }

  /** Starts no pass after this; resolves once the pass under way (if any) ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.pass;
  }

  private async runPass(): Promise<void> {
    await this.rescueOnce();
    const nextCheckMs = await this.rescueGoneOnce();
    if (this.stopped) return; // a round now would outlive shutdown
    await this.settler?.request(true);
    this.start(nextCheckMs);
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

  async rescueOnce(): Promise<{ rescued: number; dead: number }> {
    try {
      const res = await this.repo.rescueExpired(this.db);
      if (res.rescued > 0) this.logger.warn(`rescued ${res.rescued} task(s) with expired leases (${res.dead} now dead)`);
      return res;
    } catch (err) {
      this.logger.error(`lease rescue failed: ${(err as Error).message}`);
      return { rescued: 0, dead: 0 };
    }
  }
}
