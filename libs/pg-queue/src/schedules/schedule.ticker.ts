import type { Logger } from '@nestjs/common';
import { ScheduleNameTakenError } from '../errors';
import type { ScheduleRepository } from '../sql/schedule.repository';
import type { NewTaskRow } from '../sql/statement-values';
import type { TaskRepository } from '../sql/task.repository';
import type { PrismaClientLike, SqlExecutor } from '../types';
import { dueTicks, nextTick, type ValidSchedule } from './schedule.definition';

const MAX_SLEEP_MS = 30_000;

/**
 * Enqueues the tasks of due schedules. Any number of instances may run it: each pass locks the due
 * schedule rows with SKIP LOCKED, enqueues their ticks and advances them in one transaction, so
 * every tick is enqueued exactly once. Declared schedules (`schedule`) and runtime ones
 * (`schedule_runtime`) alike: the pass locks the due rows of each table so. Instances of a release
 * before runtime schedules lock and fire `schedule` alone: they never fire a runtime schedule, the
 * newer instances do, still once per tick. It sleeps until the earliest next tick of either table
 * (at most 30 s, to see schedules other instances declared; at most the poll interval while no
 * LISTEN connection works, `maxSleepMs`); a runtime schedule's write is announced by NOTIFY and
 * wakes it at once (`wake`).
 */
export class ScheduleTicker {
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  private running: Promise<void> | null = null;
  /** A wake-up came while a pass ran: it may have read the table before the change. */
  private again = false;

  constructor(
    private readonly prisma: PrismaClientLike,
    private readonly schedules: ScheduleRepository,
    private readonly tasks: TaskRepository,
    private readonly logger: Logger,
    /** The longest sleep now: without LISTEN no NOTIFY says a schedule was made, so it polls. */
    private readonly maxSleepMs: () => number = () => MAX_SLEEP_MS,
  ) {}

  /**
   * Declares this process's schedules and retires the ones of its queues that the code no longer
   * declares. Only queues handled here are retired, so an API-only process retires nothing.
   */
  async sync(declared: ValidSchedule[], handledQueues: string[]): Promise<void> {
    for (const s of declared) {
      // Not announced: the other instances see it within their 30 s.
      const written = await this.schedules.writeSchedule(this.prisma, 'declared', { ...s, firstTick: nextTick(s, new Date()) }, null);
      if (written === null) throw new ScheduleNameTakenError(s.name, 'runtime');
    }
    const retired = await this.schedules.retireSchedules(this.prisma, handledQueues, declared.map((s) => s.name));
    if (retired.length > 0) this.logger.log(`retired schedules no longer declared: ${retired.join(', ')}`);
  }

  start(): void {
    this.stopped = false;
    this.sleep(0);
  }

  /**
   * Look at the table again now (a runtime schedule was created or changed, or LISTEN came back):
   * the earliest tick may be sooner than this ticker sleeps for. One pass per notification at most.
   */
  wake(): void {
    if (this.stopped || this.timer === null) return;
    if (this.running) {
      this.again = true;
      return;
    }
    clearTimeout(this.timer);
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
          tags: null,
          debounce: null,
          dependsOn: null,
        }));
        await this.tasks.insert(tx, tasks);
        await this.schedules.advanceSchedule(tx, row, next, fire.at(-1) ?? null);
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
    this.again = false;
    try {
      await this.tickOnce();
      const ms = await this.schedules.msUntilNextSchedule(this.prisma);
      const longest = Math.min(MAX_SLEEP_MS, this.maxSleepMs());
      wait = ms === null ? longest : Math.min(longest, Math.max(10, ms));
    } catch (err) {
      this.logger.error(`schedule pass failed: ${(err as Error).message}`);
    }
    this.sleep(this.again ? 0 : wait);
  }
}
