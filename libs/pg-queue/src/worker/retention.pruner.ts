import type { Logger } from '@nestjs/common';
import type { TaskRepository } from '../sql/task.repository';
import type { SqlExecutor } from '../types';

/**
 * Deletes old history (archived tasks, dead and cancelled tasks) every `intervalMs`, in batches,
 * one instance at a time: the statement takes an advisory lock and the others skip the round. The
 * hot table only ever holds live and dead work, so claims do not slow down as history grows.
 */
export class RetentionPruner {
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;

  constructor(
    private readonly db: SqlExecutor,
    private readonly repo: TaskRepository,
    private readonly retention: { archiveMs: number; deadMs: number; intervalMs: number },
    private readonly logger: Logger,
  ) {}

  start(): void {
    this.timer = setTimeout(async () => {
      await this.pruneAll();
      if (!this.stopped) this.start();
    }, this.retention.intervalMs * (0.8 + Math.random() * 0.4));
    this.timer.unref();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
  }

  /** Prunes batch after batch until a round deletes nothing (or another instance holds the lock). */
  async pruneAll(): Promise<{ archived: number; dead: number }> {
    const total = { archived: 0, dead: 0 };
    try {
      for (;;) {
        const r = await this.repo.prune(this.db, this.retention.archiveMs, this.retention.deadMs);
        total.archived += r.archived;
        total.dead += r.dead;
        if (!r.ran || r.archived + r.dead + r.quiet === 0 || this.stopped) break;
      }
    } catch (err) {
      this.logger.error(`retention pruning failed: ${(err as Error).message}`);
    }
    return total;
  }
}
