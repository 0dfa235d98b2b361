import type { SqlExecutor, TaskLogEntry } from '../types';
import type { TaskReportRepository } from '../sql/task-report.repository';

/**
 * Task `id`'s log, oldest entry first (see TaskQueue.getLogs); null when no such task exists, live
 * or archived. Kept here rather than in TaskQueue, which delegates (its file is at the size guide).
 */
export async function taskLogs(db: SqlExecutor, repo: TaskReportRepository, id: string): Promise<TaskLogEntry[] | null> {
  const entries = await repo.logs(db, id);
  if (entries === null) return null;
  return entries.map((e) => ({
    at: new Date(e.at),
    attempt: e.attempt,
    kind: e.kind,
    message: e.message,
    durationMs: e.ms ?? null,
  }));
}
