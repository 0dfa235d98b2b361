import type { PrismaClientLike, SqlExecutor, TaskState } from '../types';
import { inBoundedTransaction, ONE_ROW_BOUNDS } from './bounded-transaction';
import { isLockTimeout } from './database-error';
import { ROW_LOCK_WAIT_MS } from './fragments.sql';
import { JIT_OFF } from './inspect.fragments';
import { notifyChannel } from './identifiers';
import { inspectStatements } from './inspect.sql';
import { operateStatements } from './operate.sql';

export type { TaskState } from '../types';

/** The states a retry takes tasks from: `retryDead` dead only, `retry(id)` dead or cancelled. */
export type RetryableState = 'dead' | 'cancelled';

import type { TaskRow } from './task-fields';
export type { TaskRow };

/** A task as `get` and `chain` read it: with a workflow's journal (JSON, no results) and wait. */
export interface TaskDetailRow extends TaskRow {
  waiting_for: string | null;
  wake_at: Date | null;
  journal: { seq: number; kind: string; name: string; outcome: string; attempt: number; startedAt: string | null; finishedAt: string; timedOut?: boolean }[] | null;
}

/**
 * What a change to a task that has not run yet did (promote, reschedule, updatePayload): `changed`,
 * or why not: it is `running`; it `waiting`s for the tasks it depends on (it cannot run before
 * them); it has `started` as a workflow (parked, or with a journal its replay reads); it has
 * `finished` (done, dead or cancelled); or there is no such task (`not-found`).
 */
export type TaskChangeResult = 'changed' | 'running' | 'waiting' | 'started' | 'finished' | 'not-found';

/** One queue of the metrics scrape (see `metrics` in inspect.sql.ts). */
export interface MetricsRow {
  queue: string;
  due: number;
  running: number;
  dead: number;
  waiting: number;
  oldest_due_ms: number | null;
  /** Running instances that handle the queue (rows of queue_handler not expired). */
  handlers: number;
  /** How long it has had due tasks and no running instance handling it; null when it has one or nothing is due. */
  unhandled_ms: number | null;
  /** Paused as a whole (see pause.sql.ts). */
  paused: boolean;
  /** How many of its partitions are paused on their own. */
  paused_partitions: number;
  /** Backed off as a whole or through its limiter (backoff.sql.ts). */
  backed_off: boolean;
}

/** Runs the operator and inspection statements (never on the claim/complete hot path). */
export class OperatorRepository {
  private readonly inspectSql;
  private readonly operateSql;
  private readonly channel: string;

  constructor(schema: string) {
    this.inspectSql = inspectStatements(schema);
    this.operateSql = operateStatements(schema);
    this.channel = notifyChannel(schema);
  }

  stats(db: SqlExecutor) {
    return db.$queryRawUnsafe<{ queue: string; state: string; count: number; oldest_due_ms: number | null }[]>(this.inspectSql.stats);
  }

  /**
   * The metrics scrape's figures per queue (see `metrics` in inspect.sql.ts: bounded, not exact).
   * With JIT off: on large tables the planner's estimate for the loose index scans passes
   * jit_above_cost, and compiling would cost many times what the statement runs for, on every
   * scrape and health check of every instance.
   */
  metrics(db: PrismaClientLike) {
    return db.$transaction(async (tx: SqlExecutor) => {
      await tx.$executeRawUnsafe(JIT_OFF);
      return tx.$queryRawUnsafe<MetricsRow[]>(this.inspectSql.metrics);
    });
  }

  /** One batch of a purge (see operate.sql.ts); the caller repeats it until it deletes nothing. */
  async purge(db: SqlExecutor, filter: { queue: string | null; states: string[]; olderThanMs: number }, limit: number): Promise<number> {
    const [r] = await db.$queryRawUnsafe<{ archived: number; live: number }[]>(this.operateSql.purge, filter.queue, filter.states, filter.olderThanMs, limit);
    return r.archived + r.live;
  }

  async connectionLimits(db: SqlExecutor): Promise<{ serverMax: number; serverInUse: number }> {
    const [r] = await db.$queryRawUnsafe<{ server_max: number; server_in_use: number }[]>(this.inspectSql.connectionLimits);
    return { serverMax: r.server_max, serverInUse: r.server_in_use };
  }

  async get(db: SqlExecutor, id: string): Promise<TaskDetailRow | null> {
    const rows = await db.$queryRawUnsafe<TaskDetailRow[]>(this.inspectSql.get, id);
    return rows[0] ?? null;
  }

  list(db: SqlExecutor, filter: { queue: string | null; state: string | null; cursor: string | null; limit: number }) {
    return db.$queryRawUnsafe<TaskRow[]>(this.inspectSql.list, filter.queue, filter.state, filter.cursor, filter.limit);
  }

  /**
   * With JIT off: the walk's estimated cost (a recursive CTE, guessed large) passes the JIT
   * thresholds, and its plan holds an index probe per archive partition, several times over:
   * compiling it costs far more than the walk runs for, and grows with every archive partition.
   */
  chain(db: PrismaClientLike, id: string) {
    return db.$transaction(async (tx: SqlExecutor) => {
      await tx.$executeRawUnsafe(JIT_OFF);
      return tx.$queryRawUnsafe<(TaskDetailRow & { stage: number })[]>(this.inspectSql.chain, id);
    });
  }

  topErrors(db: SqlExecutor, queue: string, limit: number) {
    return db.$queryRawUnsafe<{ error: string; count: number; dead: number; last_seen: Date }[]>(this.inspectSql.topErrors, queue, limit);
  }

  /**
   * Cancels task `id` (see cancel and cancelLock in operate.sql.ts): in a transaction that first
   * locks its row, so that a workflow parking at that moment is either cancelled parked or told at
   * its park. A row held past ROW_LOCK_WAIT_MS (a business transaction that enqueued a dependant of
   * it) is cancelled without the lock, as a running task with no park in sight is.
   */
  async cancel(prisma: PrismaClientLike, id: string): Promise<{ cancelled: number; requested: number }> {
    const statement = async (db: SqlExecutor) => {
      const [res] = await db.$queryRawUnsafe<{ cancelled: number; requested: number }[]>(this.operateSql.cancel, id, this.channel);
      return { cancelled: res.cancelled, requested: res.requested };
    };
    try {
      return await inBoundedTransaction(prisma, `cancel of task ${id}`, ONE_ROW_BOUNDS, 1, async (tx) => {
        await tx.$queryRawUnsafe(this.operateSql.cancelLock, id, `${ROW_LOCK_WAIT_MS}ms`);
        return statement(tx);
      });
    } catch (err) {
      if (!isLockTimeout((err as { cause?: unknown }).cause ?? err)) throw err;
      return statement(prisma);
    }
  }

  /**
   * Tasks in one of `states` matching the filter back to pending (see `retry` in operate.sql.ts):
   * the ids retried, and the dependants refused because they lack some parents' results.
   */
  async retry(
    db: SqlExecutor,
    filter: { ids: string[] | null; queue: string | null; errorLike: string | null; states: RetryableState[] },
  ): Promise<{ retried: string[]; refused: { id: string; parents: string[] }[] }> {
    const [res] = await db.$queryRawUnsafe<{ ids: string[]; refused: { id: string; parents: string[] }[] }[]>(
      this.operateSql.retry,
      filter.ids,
      filter.queue,
      filter.errorLike,
      this.channel,
      filter.states,
    );
    return { retried: res.ids, refused: res.refused };
  }

  async setPriority(db: SqlExecutor, id: string, priority: number): Promise<boolean> {
    const rows = await db.$queryRawUnsafe<unknown[]>(this.operateSql.setPriority, id, priority);
    return rows.length === 1;
  }

  /** One of the fenced changes of operate.sql.ts (see changePending there); `values` its parameters after the id (and channel). */
  async change(db: PrismaClientLike, kind: 'promote' | 'reschedule' | 'updatePayload', id: string, ...values: unknown[]): Promise<TaskChangeResult> {
    type Row = { changed: number; state: TaskState | null; parked: boolean | null; started: boolean | null };
    const { r, found } = await inBoundedTransaction(db, kind, ONE_ROW_BOUNDS, 1, async (tx) => {
      const [row] = await tx.$queryRawUnsafe<Row[]>(this.operateSql[kind], id, this.channel, ...values);
      // Gone from the hot table: archived, perhaps by a completion the lock waited for (a new snapshot sees it).
      return { r: row, found: row.state === null ? (await tx.$queryRawUnsafe<unknown[]>(this.inspectSql.get, id)).length > 0 : true };
    });
    if (r.changed > 0) return 'changed';
    if (r.state === null) return found ? 'finished' : 'not-found';
    if (r.state === 'running') return 'running';
    if (r.parked || r.started) return 'started';
    if (r.state === 'waiting') return 'waiting';
    return 'finished';
  }

  hourly(db: SqlExecutor, queue: string | null, since: Date) {
    return db.$queryRawUnsafe<{ hour: Date; queue: string; done: number; total_ms: number; avg_ms: number }[]>(
      this.inspectSql.hourly,
      queue,
      since.toISOString(),
    );
  }
}
