import type { SqlExecutor } from '../types';
import type { Lease } from './statement-values';
import { reportStatements } from './task-report.sql';

/** A log entry as stored (see task-report.sql.ts). */
export interface StoredLogEntry {
  /** Epoch ms. */
  at: number;
  attempt: number;
  kind: 'log' | 'error';
  message: string;
  /** A failed attempt's run time. */
  ms?: number | null;
}

/** Runs the statements of task-report.sql.ts: an attempt's progress and log, and reading a log. */
export class TaskReportRepository {
  private readonly sql;

  constructor(
    schema: string,
    private readonly channel: string,
  ) {
    this.sql = reportStatements(schema);
  }

  /**
   * Writes an attempt's progress (JSON text, null: unchanged) and appends log entries (null: none).
   * False when the lease no longer holds: nothing was written.
   */
  async report(db: SqlExecutor, lease: Lease, progress: string | null, entries: StoredLogEntry[] | null): Promise<boolean> {
    const rows = await db.$queryRawUnsafe<{ id: string }[]>(
      this.sql.report,
      lease.id,
      lease.token,
      progress,
      entries === null || entries.length === 0 ? null : JSON.stringify(entries),
      this.channel,
    );
    return rows.length > 0;
  }

  /** Task `id`'s log, oldest entry first; null when there is no such task (live or archived). */
  async logs(db: SqlExecutor, id: string): Promise<StoredLogEntry[] | null> {
    const rows = await db.$queryRawUnsafe<{ log: StoredLogEntry[] }[]>(this.sql.logs, id);
    return rows.length === 0 ? null : rows[0].log;
  }
}
