import type { Logger } from '@nestjs/common';
import type { ScheduleRepository } from '../sql/schedule.repository';
import type { NewTaskRow } from '../sql/statement-values';
import type { TaskRepository } from '../sql/task.repository';
import type { PrismaClientLike, SqlExecutor } from '../types';
import { dueTicks, nextTick, type ValidSchedule } from './schedule.definition';

const MAX_SLEEP_MS = 30_000;

/**
 * Enqueues the tasks of due schedules. Any number of instances may run it: each pass locks the due
 * schedule rows with SKIP LOCKED, enqueues their ticks and advances them in one transaction, so
 * every tick is enqueued exactly once. It sleeps until the earliest next tick (at most 30 s, to see
 * schedules other instances declared).
 */
export class ScheduleTicker {
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  private running: Promise<void> | null = null;

  constructor(
    private readonly prisma: PrismaClientLike,
    private readonly schedules: ScheduleRepository,
    private readonly tasks: TaskRepository,
    private readonly logger: Logger,
  ) {}

  /**
   * Declares this process's schedules and retires the ones of its queues that the code no longer
   * declares. Only queues handled here are retired, so an API-only process retires nothing.
   */
  async sync(declared: ValidSchedule[], handledQueues: string[]): Promise<void> {
    for (const s of declared) {
      await this.schedules.upsertSchedule(this.prisma, { ...s, firstTick: nextTick(s, new Date()) });
    }
    const retired = await this.schedules.retireSchedules(this.prisma, handledQueues, declared.map((s) => s.name));
    if (retired.length > 0) this.logger.log(`retired schedules no longer declared: ${retired.join(', ')}`);
  }

  start(): void {
    this.stopped = false;
    this.sleep(0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }

  /** One pass: enqueue every due tick. Returns how many tasks were enqueued. */
  async tickOnce(): Promise<number> {
    return this.prisma.$transaction(async (tx: SqlExecutor) => {
      let enqueued = 0;
      for (const row of await this.schedules.lockDueSchedules(tx)) {
        const timing = { cron: row.cron, tz: row.tz, everyMs: row.every_ms, missed: row.missed };
        const { fire, next } = dueTicks(timing, row.next_run_at, row.db_now);
        const payloadJson = JSON.stringify(row.payload);
        const tasks: NewTaskRow[] = fire.map((tick) => ({
          queue: row.queue,
          payloadJson,
          priority: 0,
          runAt: tick, // the tick itself: due now, and visible as the task's scheduled time
          delayMs: 0,
          maxAttempts: null, // the handler that runs it decides
          parentId: null,
          dedupKey: null,
          groupKey: null,
          onConflict: 'ignore',
          traceContext: null, // a tick starts a trace of its own
          partitionKey: null,
          debounce: null,
          dependsOn: null,
        }));
        await this.tasks.insert(tx, tasks);
        await this.schedules.advanceSchedule(tx, row.name, next, fire.at(-1) ?? null);
        enqueued += tasks.length;
      }
      return enqueued;
    });
  }

  private sleep(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.running = this.pass().finally(() => (this.running = null));
    }, ms);
    this.timer.unref();
  }

  private async pass(): Promise<void> {
    let wait = 1000;
    try {
      await this.tickOnce();
      const ms = await this.schedules.msUntilNextSchedule(this.prisma);
      wait = ms === null ? MAX_SLEEP_MS : Math.min(MAX_SLEEP_MS, Math.max(10, ms));
    } catch (err) {
      this.logger.error(`schedule pass failed: ${(err as Error).message}`);
    }
    this.sleep(wait);
  }
}
