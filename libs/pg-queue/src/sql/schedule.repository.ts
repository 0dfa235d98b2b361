import type { SqlExecutor } from '../types';
import { scheduleStatements } from './schedule.sql';

/** A schedule as stored (see schedule.sql.ts `read`). */
export interface StoredSchedule {
  name: string;
  queue: string;
  cron: string | null;
  every_ms: number | null;
  tz: string | null;
  payload: unknown;
  missed: 'skip' | 'once';
  next_run_at: Date;
  last_run_at: Date | null;
  updated_at: Date;
  origin: ScheduleOrigin;
}

export type ScheduleOrigin = 'code' | 'runtime';

/** A due schedule as the ticker locks it, with the database clock. */
export type ScheduleRow = Omit<StoredSchedule, 'last_run_at' | 'updated_at' | 'origin'> & { db_now: Date };

/** What the upsert writes: a validated schedule, its first tick and who owns it. */
export interface ScheduleWrite {
  name: string;
  queue: string;
  cron: string | null;
  everyMs: number | null;
  tz: string | null;
  payloadJson: string;
  missed: string;
  firstTick: Date;
  origin: ScheduleOrigin;
}

/** Runs the schedule statements. */
export class ScheduleRepository {
  private readonly scheduleSql;

  constructor(schema: string) {
    this.scheduleSql = scheduleStatements(schema);
  }

  /**
   * True when created, false when changed, null when a schedule of the other origin holds the name
   * (nothing written). `channel`: announce the write to running tickers (null: do not).
   */
  async upsertSchedule(db: SqlExecutor, s: ScheduleWrite, channel: string | null): Promise<boolean | null> {
    const [row] = await db.$queryRawUnsafe<{ created: boolean | null }[]>(
      this.scheduleSql.upsert, s.name, s.queue, s.cron, s.everyMs, s.tz, s.payloadJson, s.missed, s.firstTick.toISOString(), s.origin, channel,
    );
    return row.created;
  }

  /** Removes a runtime schedule; `origin` is what held the name (null: nothing did). */
  async removeSchedule(db: SqlExecutor, name: string): Promise<{ removed: boolean; origin: ScheduleOrigin | null }> {
    const [row] = await db.$queryRawUnsafe<{ removed: boolean; origin: ScheduleOrigin | null }[]>(this.scheduleSql.remove, name);
    return row;
  }

  /** Schedule `name`, or every schedule (null), by name. */
  async readSchedules(db: SqlExecutor, name: string | null): Promise<StoredSchedule[]> {
    return db.$queryRawUnsafe<StoredSchedule[]>(this.scheduleSql.read, name);
  }

  async retireSchedules(db: SqlExecutor, queues: string[], keep: string[]): Promise<string[]> {
    const rows = await db.$queryRawUnsafe<{ name: string }[]>(this.scheduleSql.retire, queues, keep);
    return rows.map((r) => r.name);
  }

  lockDueSchedules(tx: SqlExecutor) {
    return tx.$queryRawUnsafe<ScheduleRow[]>(this.scheduleSql.lockDue);
  }

  async advanceSchedule(tx: SqlExecutor, name: string, next: Date, fired: Date | null): Promise<void> {
    await tx.$executeRawUnsafe(this.scheduleSql.advance, name, next.toISOString(), fired ? fired.toISOString() : null);
  }

  async msUntilNextSchedule(db: SqlExecutor): Promise<number | null> {
    const [res] = await db.$queryRawUnsafe<{ ms: number | null }[]>(this.scheduleSql.untilNext);
    return res.ms;
  }
}
