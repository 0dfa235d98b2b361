import type { Logger } from '@nestjs/common';
import type { DependencySettler } from './dependency.settler';
import type { TaskRepository } from '../sql/task.repository';
import type { SqlExecutor } from '../types';

/**
 * Periodically returns tasks with expired leases to the queue (or to `dead` after their last
 * attempt). Every instance runs it; SKIP LOCKED keeps them from contending, and rows held by a live
 * transactional handler are locked, hence skipped.
 */
export class LeaseRescuer {
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  /** The pass under way (its rescue, then its settling round); stop() waits for it. */
  private pass: Promise<void> | null = null;

  constructor(
    private readonly db: SqlExecutor,
    private readonly repo: TaskRepository,
    private readonly intervalMs: number,
    private readonly logger: Logger,
    /** Settles dependency debts each round (see DependencySettler). */
    private readonly settler: DependencySettler | null = null,
  ) {}

  start(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.pass = this.runPass().finally(() => (this.pass = null));
    }, this.intervalMs * (0.8 + Math.random() * 0.4));
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
    if (this.stopped) return; // a round now would outlive shutdown
    await this.settler?.request();
    this.start();
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
