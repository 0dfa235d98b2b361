import type { SqlExecutor } from '../types';
import { scheduleStatements } from './schedule.sql';

export interface ScheduleRow {
  name: string;
  queue: string;
  cron: string | null;
  every_ms: number | null;
  tz: string | null;
  payload: unknown;
  missed: 'skip' | 'once';
  next_run_at: Date;
  db_now: Date;
}

/** Runs the schedule statements. */
export class ScheduleRepository {
  private readonly scheduleSql;

  constructor(schema: string) {
    this.scheduleSql = scheduleStatements(schema);
  }

  async upsertSchedule(db: SqlExecutor, s: { name: string; queue: string; cron: string | null; everyMs: number | null; tz: string | null; payloadJson: string; missed: string; firstTick: Date }) {
    await db.$executeRawUnsafe(this.scheduleSql.upsert, s.name, s.queue, s.cron, s.everyMs, s.tz, s.payloadJson, s.missed, s.firstTick.toISOString());
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
