import type { PrismaClientLike, SqlExecutor } from '../types';
import { inBoundedTransaction, type TransactionBounds } from './bounded-transaction';
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
  /** A row of `schedule` (declared in code), not of `schedule_runtime`. */
  declared: boolean;
}

/** A due schedule as the ticker locks it, with the database clock; `runtime`: a row of `schedule_runtime`. */
export type ScheduleRow = Omit<StoredSchedule, 'last_run_at' | 'updated_at' | 'declared'> & { db_now: Date; runtime: boolean };

/** What an upsert writes: a validated schedule and its first tick. */
export interface ScheduleWrite {
  name: string;
  queue: string;
  cron: string | null;
  everyMs: number | null;
  tz: string | null;
  payloadJson: string;
  missed: string;
  firstTick: Date;
}

/**
 * A write waits at most for a ticker pass that holds the row (milliseconds: it enqueues the tick
 * and advances the row), or for a write of the same name; the bounds only stop a stuck
 * transaction from holding the caller.
 */
const WRITE_BOUNDS: TransactionBounds = { maxWaitMs: 5000, lockWaitMs: 5000, idleMs: 5000, statementMs: 10_000, transactionMs: 15_000, perRowMs: 0 };

/** Runs the schedule statements. */
export class ScheduleRepository {
  private readonly scheduleSql;

  constructor(private readonly schema: string) {
    this.scheduleSql = scheduleStatements(schema);
  }

  /**
   * Declares (`declared`, a startup) or creates / changes at run time a schedule, in a READ
   * COMMITTED transaction of its own under the name's lock (see schedule.sql.ts `lockName`).
   * True when created, false when changed, null when the other kind holds the name (nothing
   * written). `channel`: announce the write to running tickers (null: do not).
   */
  writeSchedule(root: PrismaClientLike, kind: 'declared' | 'runtime', s: ScheduleWrite, channel: string | null): Promise<boolean | null> {
    const sql = kind === 'declared' ? this.scheduleSql.declare : this.scheduleSql.upsertRuntime;
    const what = kind === 'declared' ? `declaring schedule "${s.name}"` : `upsertSchedule("${s.name}")`;
    return inBoundedTransaction(root, what, WRITE_BOUNDS, 1, async (tx) => {
      await tx.$queryRawUnsafe(this.scheduleSql.lockName, this.schema, s.name);
      const [row] = await tx.$queryRawUnsafe<{ created: boolean | null }[]>(sql, s.name, s.queue, s.cron, s.everyMs, s.tz, s.payloadJson, s.missed, s.firstTick.toISOString(), channel);
      return row.created;
    });
  }

  /** Removes a runtime schedule (under the write bounds); `declared`: a declared schedule has the name. */
  removeSchedule(root: PrismaClientLike, name: string): Promise<{ removed: boolean; declared: boolean }> {
    return inBoundedTransaction(root, `removeSchedule("${name}")`, WRITE_BOUNDS, 1, async (tx) => {
      const [row] = await tx.$queryRawUnsafe<{ removed: boolean; declared: boolean }[]>(this.scheduleSql.remove, name);
      return row;
    });
  }

  /** Schedule `name`, or every schedule (null), declared and runtime, by name. */
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

  /** Advances the row `row` came from (`schedule` or `schedule_runtime`: a name may be in both, see schedule.sql.ts). */
  async advanceSchedule(tx: SqlExecutor, row: Pick<ScheduleRow, 'name' | 'runtime'>, next: Date, fired: Date | null): Promise<void> {
    const sql = row.runtime ? this.scheduleSql.advanceRuntime : this.scheduleSql.advanceDeclared;
    await tx.$executeRawUnsafe(sql, row.name, next.toISOString(), fired ? fired.toISOString() : null);
  }

  async msUntilNextSchedule(db: SqlExecutor): Promise<number | null> {
    const [res] = await db.$queryRawUnsafe<{ ms: number | null }[]>(this.scheduleSql.untilNext);
    return res.ms;
  }
}
