import type { PrismaClientLike, SqlExecutor, TaskInfo, TaskState } from '../types';
import { dashboardStatements } from './dashboard.sql';
import { JIT_OFF } from './inspect.fragments';

/** Hot-table states and archive states, as the dashboard's filters name them. */
export type DashboardTaskState = TaskState;

/** Where a task row lives: the hot table (pending, running, dead, cancelled) or the archive. */
export type TaskSource = 'task' | 'archive';

/** Per queue, from the hot table; each count stops at `DASHBOARD_LIMITS.countCap`. */
export interface QueueCounts {
  queue: string;
  due: number;
  later: number;
  /** Waiting for their dependencies. */
  waiting: number;
  running: number;
  dead: number;
  oldestDueMs: number | null;
  /** Running instances that handle the queue. */
  handlers: number;
  /** How long it has had due tasks and no running instance handling it; null when it has one or nothing is due. */
  unhandledMs: number | null;
}

/** One group of the last hour: a queue (`minutesAgo` null) or a minute of every queue (`queue` null). */
export interface RecentRow {
  queue: string | null;
  minutesAgo: number | null;
  done: number;
  cancelled: number;
  failed: number;
  p50Ms: number | null;
  p95Ms: number | null;
  /** Set when the archive sample hit its cap: finished tasks before this time were not read. */
  sampledFrom: Date | null;
}

export interface TaskListFilter {
  queue: string | null;
  state: DashboardTaskState | null;
  key: string | null;
  group: string | null;
  /** One of the task's tags. */
  tag: string | null;
  /** Case-insensitive substring of the last error. */
  error: string | null;
  /** Exclusive upper bound on the id (the previous page's last id), or null for the newest. */
  cursor: string | null;
}

export interface TaskListRow {
  id: string;
  queue: string;
  state: DashboardTaskState;
  priority: number;
  runAt: Date;
  attempt: number;
  maxAttempts: number | null;
  /** The first 300 characters. */
  lastError: string | null;
  key: string | null;
  group: string | null;
  tags: string[] | null;
  createdAt: Date;
  finishedAt: Date | null;
  /** The last ctx.progress value, or null. */
  progress: unknown;
  source: TaskSource;
}

export interface TaskListPage {
  rows: TaskListRow[];
  /** The cursor of the next page, or null on the last one. */
  next: string | null;
  /** True when the scan budget ran out before the page filled (the next page searches further down). */
  budgetSpent: boolean;
}

/** A task as its page shows it: the operator API's TaskInfo with its payload pretty-printed. */
export interface TaskDetail extends Omit<TaskInfo, 'state' | 'payload'> {
  source: TaskSource;
  state: DashboardTaskState;
  /** Pretty-printed JSON. */
  payload: string;
  cancelRequested: boolean;
}

export interface PipelineStage {
  stage: number;
  id: string;
  queue: string;
  state: DashboardTaskState;
  parentId: string | null;
  attempt: number;
  createdAt: Date;
  startedAt: Date | null;
  finishedAt: Date | null;
}

export interface ScheduleListRow {
  name: string;
  queue: string;
  cron: string | null;
  everyMs: number | null;
  tz: string | null;
  missed: 'skip' | 'once';
  nextRunAt: Date;
  lastRunAt: Date | null;
  dbNow: Date;
  /** Made at run time (upsertSchedule): the dashboard may edit and remove it; a declared one it only shows. */
  runtime: boolean;
}

/** The bounds every dashboard read keeps to (see dashboard.sql.ts). */
export const DASHBOARD_LIMITS = {
  /** Hot-table counts per queue and state stop here ("10000+"). */
  countCap: 10_000,
  /** The overview's window: the last hour. */
  windowMs: 3_600_000,
  /** Archived rows the overview reads at most for the hour (and failures per queue). */
  sampleCap: 20_000,
  /** Rows per table a filtered task-list page reads at most. */
  scanBudget: 20_000,
  pageSize: 50,
  /** Tasks of one pipeline drawn at most. */
  pipelineCap: 200,
  schedules: 500,
} as const;

/** Runs the dashboard's statements; the only caller of its SQL. Rows come back camelCase. */
export class DashboardRepository {
  private readonly sql;

  constructor(schema: string) {
    this.sql = dashboardStatements(schema);
  }

  /** The overview's two reads, in the caller's transaction `tx` (one snapshot, JIT off: see JIT_OFF). */
  async overview(tx: SqlExecutor): Promise<{ queues: QueueCounts[]; recent: RecentRow[] }> {
    await tx.$executeRawUnsafe(JIT_OFF);
    const queues = await tx.$queryRawUnsafe<QueueCounts[]>(this.sql.queues, DASHBOARD_LIMITS.countCap);
    const names = queues.map((q) => q.queue);
    const recent = await tx.$queryRawUnsafe<RecentRow[]>(this.sql.recent, names, DASHBOARD_LIMITS.windowMs, DASHBOARD_LIMITS.sampleCap);
    return { queues, recent };
  }

  async tasks(db: SqlExecutor, f: TaskListFilter): Promise<TaskListPage> {
    const size = DASHBOARD_LIMITS.pageSize;
    const rows = await db.$queryRawUnsafe<(TaskListRow & { low: string | null })[]>(
      this.sql.tasks,
      f.queue,
      f.state,
      f.key,
      f.group,
      f.error,
      f.cursor,
      size,
      DASHBOARD_LIMITS.scanBudget,
      f.tag,
    );
    const low = rows[0]?.low ?? null;
    const found = rows.filter((r) => r.id !== null).map(({ low: _low, ...row }) => row);
    if (found.length > size) return { rows: found.slice(0, size), next: found[size - 1].id, budgetSpent: false };
    return { rows: found, next: low, budgetSpent: low !== null };
  }

  async task(db: SqlExecutor, id: string): Promise<TaskDetail | null> {
    const rows = await db.$queryRawUnsafe<TaskDetail[]>(this.sql.task, id);
    return rows[0] ?? null;
  }

  /** With JIT off, as OperatorRepository.chain (the same walk). */
  chain(db: PrismaClientLike, id: string): Promise<PipelineStage[]> {
    return db.$transaction(async (tx: SqlExecutor) => {
      await tx.$executeRawUnsafe(JIT_OFF);
      return tx.$queryRawUnsafe<PipelineStage[]>(this.sql.chain, id, DASHBOARD_LIMITS.pipelineCap);
    });
  }

  schedules(db: SqlExecutor): PromiseLike<ScheduleListRow[]> {
    return db.$queryRawUnsafe<ScheduleListRow[]>(this.sql.schedules, DASHBOARD_LIMITS.schedules);
  }
}
