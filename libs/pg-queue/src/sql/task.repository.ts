import { PgQueueError } from '../errors';
import { isRootClient } from '../prisma-adapter';
import type { SqlExecutor } from '../types';
import { inBoundedTransaction, type TransactionBounds } from './bounded-transaction';
import { claimStatements } from './claim.sql';
import { completeStatements, type FinishedRetention } from './complete.sql';
import { DependencyRepository } from './dependencies.repository';
import { byCompletionBytes } from './completion-batches';
import { DEPENDANTS_BOUNDS, TaskInserter } from './insert.repository';
import { byLeaseWhenHeld } from './held-rows';
import { notifyChannel } from './identifiers';
import { ROW_LOCK_WAIT_MS } from './fragments.sql';
import { maintainStatements } from './maintain.sql';
import { TaskReportRepository } from './task-report.repository';
import { WorkflowRepository } from './workflow.repository';
import {
  assertOneLeasePerTask,
  leaseParams,
  msList,
  oneLeasePerTask,
  parseIds,
  resultsJson,
  taskRowsJson,
  type BatchBackend,
  type Claim,
  type ClaimedRow,
  type CompleteResult,
  type FailedState,
  type Failure,
  type Lease,
  type NewTaskRow,
  type RanLease,
} from './statement-values';

/**
 * Bounds of the transaction that completes one lease-mode attempt with follow-ups that have
 * dependencies (see complete): those of enqueue with dependants, whose statements it runs after
 * the completion's, with more time per follow-up (one or two statements each).
 */
export const FOLLOW_UP_BOUNDS: TransactionBounds = { ...DEPENDANTS_BOUNDS, perRowMs: 20 };


/** The error an attempt fails with when its follow-ups could not be inserted (see complete). */
function followUpsFailed(taskId: string, cause: unknown): PgQueueError {
  const reason = cause instanceof Error ? cause.message : String(cause);
  const err = new PgQueueError(`pg-queue: the follow-ups of task ${taskId} could not be enqueued, so its attempt fails: ${reason.replace(/^pg-queue: /, '')}`);
  err.cause = cause;
  return err;
}

/**
 * The only place that runs the queue's SQL. Statement texts are built once per schema; every value
 * is a bound parameter. Each method takes the executor to run on: the PrismaClient for a statement
 * that commits on its own, or a transaction client to join the caller's transaction.
 */
export class TaskRepository {
  private readonly inserter: TaskInserter;
  readonly dependencies: DependencyRepository;
  readonly workflows: WorkflowRepository;
  /** Progress and logs (task-report.sql.ts). */
  readonly reports: TaskReportRepository;
  private readonly claimSql;
  private readonly completeSql;
  /** The same, for statements run outside a transaction (lease mode): row-lock waits bounded. */
  private readonly completeSqlOutside;
  private readonly maintainSql;
  readonly channel: string;
  /** Finished tasks are archived (the completion then records run times). */
  private readonly archives: boolean;

  constructor(readonly schema: string, retention: FinishedRetention) {
    this.archives = retention === 'archive';
    this.claimSql = claimStatements(schema);
    this.completeSql = completeStatements(schema, retention);
    this.completeSqlOutside = completeStatements(schema, retention, ROW_LOCK_WAIT_MS);
    this.maintainSql = maintainStatements(schema);
    this.channel = notifyChannel(schema);
    this.dependencies = new DependencyRepository(schema, this.channel);
    this.workflows = new WorkflowRepository(schema, this.channel);
    this.reports = new TaskReportRepository(schema);
    this.inserter = new TaskInserter(schema, this.channel, this.dependencies);
  }

  /**
   * Inserts tasks and returns their ids in input order; for a live dedup key, the existing task's
   * id (see TaskInserter).
   */
  insert(db: SqlExecutor, rows: NewTaskRow[]): Promise<string[]> {
    return this.inserter.insert(db, rows);
  }

  /** `maxAttempts`: the claiming handler's limit, for tasks whose enqueuer set none. */
  async claim(db: SqlExecutor, queue: string, limit: number, workerId: string, leaseMs: number, maxAttempts: number): Promise<Claim> {
    const [res] = await db.$queryRawUnsafe<{ claimed: string; next_due_in_ms: number | null; db_now_ms: number; paused: boolean | null }[]>(
      this.claimSql.claim, queue, limit, workerId, leaseMs, maxAttempts,
    );
    return { rows: JSON.parse(res.claimed) as ClaimedRow[], nextDueInMs: res.next_due_in_ms, dbNowMs: res.db_now_ms, paused: res.paused === true };
  }

  /** The ids among `leases` (just claimed) whose group has another running task (see claim.sql.ts). */
  async groupRivals(db: SqlExecutor, leases: Lease[]): Promise<Set<string>> {
    const [res] = await db.$queryRawUnsafe<{ ids: string }[]>(this.claimSql.groupRivals, ...leaseParams(leases));
    return new Set(parseIds(res.ids));
  }

  /**
   * Row-locks the leases still held and bounds the transaction's idle time and statements; returns
   * the ids held and the transaction's backend (for cancelStatement).
   */
  async lockLeases(tx: SqlExecutor, leases: Lease[], limits: { idleMs: number; statementMs: number }): Promise<{ held: Set<string>; backend: BatchBackend }> {
    assertOneLeasePerTask(leases);
    const [res] = await tx.$queryRawUnsafe<{ ids: string; backend_pid: number; xact_id: string }[]>(
      this.claimSql.lockLeases,
      ...leaseParams(leases),
      String(Math.ceil(limits.idleMs)),
      String(Math.ceil(limits.statementMs)),
    );
    return { held: new Set(parseIds(res.ids)), backend: { pid: res.backend_pid, xactId: res.xact_id } };
  }

  /** Cancels the statement `backend` runs, if it still runs that transaction (see maintain.sql.ts). */
  async cancelStatement(db: SqlExecutor, backend: BatchBackend): Promise<void> {
    await db.$queryRawUnsafe(this.maintainSql.cancelStatement, backend.pid, backend.xactId);
  }

  /**
   * Completes the leases still held and inserts their follow-ups; a lease in none of the result
   * sets was lost. Follow-ups that depend on one another or on other tasks (ctx.enqueue with
   * dependsOn) need enqueue's insert path (ids, then dependants with their links): such an attempt
   * is completed on its own after the batch's statement, then all its follow-ups go in through
   * `insert`, only if its fence held. Each such attempt is isolated: its own bounded transaction
   * (FOLLOW_UP_BOUNDS), or a savepoint when `db` is a transaction client. When its follow-ups
   * cannot go in (a task it named is gone since ctx.enqueue checked it, a bound ran out, ...) its
   * completion is undone with them and it is returned in `failed`, lease still held, for the
   * caller to record as a failed attempt; the batch's other attempts complete.
   */
  async complete(db: SqlExecutor, leases: RanLease[], followUps: NewTaskRow[]): Promise<CompleteResult> {
    const graphs = new Map<string, NewTaskRow[]>();
    for (const f of followUps) if (f.dependsOn !== null) graphs.set(f.parentId!, []);
    if (graphs.size === 0) return this.completeFenced(db, leases, followUps);
    for (const f of followUps) graphs.get(f.parentId!)?.push(f);
    const res = await this.completeFenced(db, leases.filter((l) => !graphs.has(l.id)), followUps.filter((f) => !graphs.has(f.parentId!)));
    for (const lease of leases) {
      const own = graphs.get(lease.id);
      if (own === undefined) continue;
      const one = await this.isolated(db, own.length, async (tx) => {
        const r = await this.completeFenced(tx, [lease], []);
        if (r.done.has(lease.id) || r.rerun.has(lease.id)) await this.insert(tx, own);
        return r;
      });
      if ('error' in one) {
        res.failed.set(lease.id, followUpsFailed(lease.id, one.error));
        continue;
      }
      for (const key of ['done', 'cancelled', 'rerun'] as const) for (const id of one.value[key]) res[key].add(id);
    }
    return res;
  }

  /**
   * Runs `work` so that its failure undoes its own writes and nothing else: in a transaction of its
   * own with explicit bounds, or, inside the caller's transaction, between a savepoint and its
   * release. Returns the work's error instead of throwing it; throws only when the caller's
   * transaction itself can no longer be used (the rollback to the savepoint failed).
   */
  private async isolated<T>(db: SqlExecutor, rows: number, work: (tx: SqlExecutor) => Promise<T>): Promise<{ value: T } | { error: unknown }> {
    if (isRootClient(db)) {
      try {
        const value = await inBoundedTransaction(db, 'the completion', FOLLOW_UP_BOUNDS, rows, work);
        return { value };
      } catch (error) {
        return { error };
      }
    }
    await db.$executeRawUnsafe(this.completeSql.followUpsSavepoint);
    let value: T;
    try {
      value = await work(db);
    } catch (error) {
      await db.$executeRawUnsafe(this.completeSql.followUpsRollback);
      await db.$executeRawUnsafe(this.completeSql.followUpsRelease);
      return { error };
    }
    await db.$executeRawUnsafe(this.completeSql.followUpsRelease);
    return { value };
  }

  /**
   * The completion statement, fenced. A rerun request that commits while the statement runs is
   * seen by the DELETE's recheck of the row but not by the rerun UPDATE's snapshot, so the lease
   * lands in no set: a second statement, with a fresh snapshot, settles those (rare: most batches
   * never need it). Outside a transaction, leases whose row a business transaction holds are
   * completed one by one, and those still held come back in `held` (byLeaseWhenHeld).
   */
  private async completeFenced(db: SqlExecutor, leases: RanLease[], followUps: NewTaskRow[]): Promise<CompleteResult> {
    const result: CompleteResult = { done: new Set(), cancelled: new Set(), rerun: new Set(), failed: new Map(), held: new Set() };
    if (leases.length === 0) return result;
    const followUpsOf = (part: RanLease[]) => {
      const ids = new Set(part.map((l) => l.id));
      return followUps.filter((f) => f.parentId !== null && ids.has(f.parentId));
    };
    for (const part of byCompletionBytes(leases, followUps)) {
      const held = await byLeaseWhenHeld(part, (p) => this.completeSettled(db, p, followUpsOf(p), result));
      for (const l of held) result.held.add(l.id);
    }
    return result;
  }

  /** One completion statement, and a second for the leases that raced a rerun request; adds to `into`. */
  private async completeSettled(db: SqlExecutor, leases: RanLease[], followUps: NewTaskRow[], into: CompleteResult): Promise<void> {
    const settled = (id: string) => into.done.has(id) || into.rerun.has(id) || into.cancelled.has(id);
    const add = (r: CompleteResult) => {
      for (const key of ['done', 'cancelled', 'rerun'] as const) for (const id of r[key]) into[key].add(id);
    };
    add(await this.completeOnce(db, leases, followUps));
    const unsettled = leases.filter((l) => !settled(l.id));
    if (unsettled.length === 0) return;
    const ids = new Set(unsettled.map((l) => l.id));
    add(await this.completeOnce(db, unsettled, followUps.filter((f) => f.parentId !== null && ids.has(f.parentId))));
  }

  private async completeOnce(db: SqlExecutor, leases: RanLease[], followUps: NewTaskRow[]): Promise<CompleteResult> {
    assertOneLeasePerTask(leases);
    const now = performance.now();
    const ranAgo = this.archives ? [msList(leases, (l) => now - l.startedAt), msList(leases, (l) => now - l.finishedAt)] : [];
    const [res] = await db.$queryRawUnsafe<{ done_ids: string; cancelled_ids: string; rerun_ids: string }[]>(
      this.statementsFor(db).complete,
      ...leaseParams(leases),
      taskRowsJson(followUps),
      this.channel,
      ...ranAgo,
      resultsJson(leases),
    );
    return {
      done: new Set(parseIds(res.done_ids)),
      cancelled: new Set(parseIds(res.cancelled_ids)),
      rerun: new Set(parseIds(res.rerun_ids)),
      failed: new Map(),
      held: new Set(),
    };
  }

  /**
   * Records failed attempts; returns the new state of each task whose lease still held.
   * `retryBlocksGroup` false moves a retried group task behind the rest of its group. Outside a
   * transaction, the ids of attempts whose row a business transaction holds go to `held` (not
   * recorded, lease still held; see byLeaseWhenHeld).
   */
  async fail(db: SqlExecutor, failures: Failure[], retryBlocksGroup = true, held?: Set<string>): Promise<Map<string, FailedState>> {
    const states = new Map<string, FailedState>();
    if (failures.length === 0) return states;
    assertOneLeasePerTask(failures);
    const stillHeld = await byLeaseWhenHeld(failures, async (part) => {
      const rows = await db.$queryRawUnsafe<{ id: string; state: FailedState }[]>(
        this.statementsFor(db).fail,
        ...leaseParams(part),
        part.map((f) => f.error),
        part.map((f) => Math.max(0, Math.round(f.delayMs))),
        part.map((f) => f.fatal),
        this.channel,
        retryBlocksGroup,
        part.map((f) => (f.ranMs == null ? null : Math.max(0, Math.round(f.ranMs)))),
      );
      for (const r of rows) states.set(r.id, r.state);
    });
    for (const f of stillHeld) held?.add(f.id);
    return states;
  }

  /** Gives leases back uncounted; returns the ids given back (a row a business transaction holds is not: its lease expires). */
  async release(db: SqlExecutor, leases: Lease[]): Promise<Set<string>> {
    const released = new Set<string>();
    if (leases.length === 0) return released;
    assertOneLeasePerTask(leases);
    await byLeaseWhenHeld(leases, async (part) => {
      const [res] = await db.$queryRawUnsafe<{ released_ids: string }[]>(this.statementsFor(db).release, ...leaseParams(part), this.channel);
      for (const id of parseIds(res.released_ids)) released.add(id);
    });
    return released;
  }

  /**
   * Extends the leases still held; returns them by token, each with whether a cancel was requested.
   * A lease whose row another transaction holds counts as held without waiting (see heartbeat in
   * complete.sql.ts); the next heartbeat extends it.
   */
  async heartbeat(db: SqlExecutor, leases: Lease[], leaseMs: number): Promise<Map<string, { cancelled: boolean }>> {
    const held = new Map<string, { cancelled: boolean }>();
    for (const run of oneLeasePerTask(leases, (l) => l.id)) {
      const rows = await db.$queryRawUnsafe<{ id: string; cancelled: boolean }[]>(this.completeSql.heartbeat, ...leaseParams(run), leaseMs);
      const tokenOf = new Map(run.map((l) => [l.id, l.token]));
      for (const r of rows) held.set(tokenOf.get(r.id)!, { cancelled: r.cancelled });
    }
    return held;
  }

  /** The lease-ending statements for `db`: row-lock waits bounded outside a transaction (see rowLockBound). */
  private statementsFor(db: SqlExecutor) {
    return isRootClient(db) ? this.completeSqlOutside : this.completeSql;
  }

  async rescueExpired(db: SqlExecutor, limit = 1000): Promise<{ rescued: number; dead: number }> {
    const [res] = await db.$queryRawUnsafe<{ rescued: number; dead: number }[]>(this.maintainSql.rescueExpired, limit, this.channel);
    return { rescued: res.rescued, dead: res.dead };
  }

  /** One round of retention; `ran` is false when another instance holds the pruner lock. */
  async prune(db: SqlExecutor, archiveMs: number, deadMs: number, limit = 5000): Promise<{ ran: boolean; archived: number; dead: number; quiet: number }> {
    const [res] = await db.$queryRawUnsafe<{ ran: boolean; archived: number; dead: number; quiet: number }[]>(this.maintainSql.prune, archiveMs, deadMs, limit, this.schema);
    return res;
  }

  /**
   * One change to the archive's partitions (see archivePartitionStep): `action` null when none is
   * due, `busy` when its DDL gave up waiting for locks; `rowsEstimate` the planner's estimate of a
   * dropped partition's rows (null when never analyzed).
   */
  async archivePartitionStep(db: SqlExecutor, widthMs: number, ahead: number, archiveMs: number): Promise<ArchivePartitionStep> {
    const [res] = await db.$queryRawUnsafe<ArchivePartitionStep[]>(this.maintainSql.archivePartitionStep, widthMs, ahead, archiveMs, this.schema);
    return res;
  }
}

export interface ArchivePartitionStep {
  ran: boolean;
  action: 'created' | 'dropped' | 'busy' | null;
  partition: string | null;
  rowsEstimate: number | null;
}
