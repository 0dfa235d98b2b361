import type { Logger } from '@nestjs/common';
import type { TaskRepository } from '../sql/task.repository';
import type { SqlExecutor } from '../types';
import { PeriodicPass } from './periodic.pass';

/** The most partition changes one round makes (normally none or one: a period begins or ends). */
const MAX_PARTITION_STEPS = 100;

/**
 * What a round removed. `archived`: rows deleted one by one (the default partition), counted;
 * `droppedRowsEstimate`: the rows of the `partitionsDropped` dropped partitions as the planner
 * estimates them (pg_class.reltuples; a partition never analyzed counts 0), since counting them
 * would read each whole partition before dropping it.
 */
export interface PruneResult {
  archived: number;
  dead: number;
  partitionsDropped: number;
  droppedRowsEstimate: number;
}

export interface RetentionSettings {
  archiveMs: number;
  deadMs: number;
  intervalMs: number;
  archivePartitionMs: number;
}

/**
 * Keeps history bounded, every `intervalMs`, one instance at a time (each statement takes the
 * pruner's advisory lock and the others skip the round). The hot table only ever holds live and
 * dead work, so claims do not slow down as history grows. A round:
 * 1. changes the archive's partitions one statement at a time: drops those wholly past
 *    `archiveMs` (no row is deleted, nothing is left to vacuum) and creates the coming periods'
 *    ahead of time, so completions never insert into the default partition. A step that gave up
 *    waiting for its locks ends this part of the round; the next round retries.
 * 2. deletes, in batches, rows of the default partition past `archiveMs`, dead and cancelled tasks
 *    past `deadMs`, and flow control's quiet keys and windows.
 */
export class RetentionPruner {
  private readonly loop: PeriodicPass;

  constructor(
    private readonly db: SqlExecutor,
    private readonly repo: TaskRepository,
    private readonly retention: RetentionSettings,
    private readonly logger: Logger,
  ) {
    this.loop = new PeriodicPass(() => this.pruneAll().then(() => null), () => retention.intervalMs, 0.2, (err) => this.logger.error(`retention round failed: ${(err as Error).message}`));
  }

  /** The first round in about the interval. */
  start(): void {
    this.loop.schedule();
  }

  /** Starts no statement after this; resolves once the one under way (if any) answered. */
  stop(): Promise<void> {
    return this.loop.stop();
  }

  /**
   * One round: the archive's partitions, then batch after batch of rows until one deletes nothing
   * (or another instance holds the lock).
   */
  async pruneAll(): Promise<PruneResult> {
    const total: PruneResult = { archived: 0, dead: 0, partitionsDropped: 0, droppedRowsEstimate: 0 };
    try {
      await this.maintainPartitions(total);
    } catch (err) {
      this.logger.error(`archive partition maintenance failed: ${(err as Error).message}`);
    }
    try {
      while (!this.loop.isStopped) {
        const r = await this.repo.prune(this.db, this.retention.archiveMs, this.retention.deadMs);
        total.archived += r.archived;
        total.dead += r.dead;
        if (!r.ran || r.archived + r.dead + r.quiet === 0) break;
      }
    } catch (err) {
      this.logger.error(`retention pruning failed: ${(err as Error).message}`);
    }
    return total;
  }

  private async maintainPartitions(total: PruneResult): Promise<void> {
    const { archivePartitionMs: width, intervalMs, archiveMs } = this.retention;
    // Enough periods ahead that two missed rounds still find theirs created.
    const ahead = Math.min(30, Math.max(3, Math.ceil((2 * intervalMs) / width)));
    for (let i = 0; i < MAX_PARTITION_STEPS && !this.loop.isStopped; i++) {
      const step = await this.repo.archivePartitionStep(this.db, width, ahead, archiveMs);
      if (!step.ran || step.action === null) return;
      if (step.action === 'busy') {
        this.logger.debug(`archive partition ${step.partition}: locks busy, retrying next round`);
        return;
      }
      if (step.action === 'dropped') {
        total.droppedRowsEstimate += step.rowsEstimate ?? 0;
        total.partitionsDropped++;
        const rows = step.rowsEstimate === null ? 'never analyzed' : `about ${step.rowsEstimate} rows, the planner's estimate`;
        this.logger.debug(`archive partition ${step.partition} dropped (${rows})`);
      } else this.logger.debug(`archive partition ${step.partition} ${step.action}`);
    }
  }
}
