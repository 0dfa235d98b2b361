import { isRootClient } from '../prisma-adapter';
import type { SqlExecutor } from '../types';
import { claimSql, claimStatements, claimedRows, newClaimId } from './claim.sql';
import { completeStatements, type FinishedRetention } from './complete.sql';
import { DependencyRepository, type SettleScope } from './dependencies.repository';
import { TaskInserter } from './insert.repository';
import { byLeaseWhenHeld } from './held-rows';
import { notifyChannel } from './identifiers';
import { ROW_LOCK_WAIT_MS } from './fragments.sql';
import { maintainStatements } from './maintain.sql';
import { TaskReportRepository } from './task-report.repository';
import { WorkflowRepository } from './workflow.repository';
import { CompletionRepository } from './completion.repository';
import {
  assertOneLeasePerTask,
  backOffsJson,
  GivenBack,
  leaseParams,
  oneLeasePerTask,
  parseIds,
  type BackOff,
  type BatchBackend,
  type Claim,
  type CompleteResult,
  type FailedState,
  type Failure,
  type GivenBackRow,
  type Lease,
  type NewTaskRow,
  type RanLease,
} from './statement-values';

/**
 * The only place that runs the queue's SQL. Statement texts are built once per schema; every value
 * is a bound parameter. Each method takes the executor to run on: the PrismaClient for a statement
 * that commits on its own, or a transaction client to join the caller's transaction.
 */
export class TaskRepository {
  private readonly inserter: TaskInserter;
  private readonly completions: CompletionRepository;
  readonly dependencies: DependencyRepository;
  readonly workflows: WorkflowRepository;
  /** Progress and logs (task-report.sql.ts). */
  readonly reports: TaskReportRepository;
  private readonly claimTexts;
  private readonly completeSql;
  /** The same, for statements run outside a transaction (lease mode): row-lock waits bounded. */
  private readonly completeSqlOutside;
  private readonly maintainSql;
  readonly channel: string;
  /** Finished tasks are archived (the completion then records run times). */
  private readonly archives: boolean;

  constructor(readonly schema: string, retention: FinishedRetention) {
    this.archives = retention === 'archive';
    this.claimTexts = claimStatements(schema);
    this.completeSql = completeStatements(schema, retention);
    this.completeSqlOutside = completeStatements(schema, retention, ROW_LOCK_WAIT_MS);
    this.maintainSql = maintainStatements(schema);
    this.channel = notifyChannel(schema);
    this.dependencies = new DependencyRepository(schema, this.channel);
    this.workflows = new WorkflowRepository(schema, this.channel);
    this.reports = new TaskReportRepository(schema, this.channel);
    this.inserter = new TaskInserter(schema, this.channel, this.dependencies);
    this.completions = new CompletionRepository(this.completeSql, this.completeSqlOutside, this.channel, this.archives, (db, rows) => this.insert(db, rows));
  }

  /**
   * Inserts tasks and returns their ids in input order; for a live dedup key, the existing task's
   * id (see TaskInserter).
   */
  insert(db: SqlExecutor, rows: NewTaskRow[]): Promise<string[]> {
    return this.inserter.insert(db, rows);
  }

  /**
   * `maxAttempts`: the claiming handler's limit, for tasks whose enqueuer set none. `claimId`: 16
   * hex digits that begin every lease token of the claim (see claim.sql.ts), which a claimer keeps
   * to give the rows back should the answer be lost.
   */
  async claim(db: SqlExecutor, queue: string, limit: number, workerId: string, leaseMs: number, maxAttempts: number, claimId: string = newClaimId()): Promise<Claim> {
    const [res] = await db.$queryRawUnsafe<{ claimed: string; next_due_in_ms: number | null; db_now_ms: number; paused: boolean | null }[]>(
      claimSql(this.claimTexts, limit), queue, limit, workerId, leaseMs, maxAttempts, claimId,
    );
    return { rows: claimedRows(res.claimed, queue), nextDueInMs: res.next_due_in_ms, dbNowMs: res.db_now_ms, paused: res.paused === true };
  }

  /** The leases of `queue` that the claims `claimIds` took and that are still held (see claimedWith). */
  async claimedWith(db: SqlExecutor, queue: string, claimIds: string[]): Promise<Lease[]> {
    return db.$queryRawUnsafe<Lease[]>(this.claimTexts.claimedWith, queue, claimIds.join(','));
  }

  /** The ids among `leases` (just claimed) whose group has another running task (see claim.sql.ts). */
  async groupRivals(db: SqlExecutor, leases: Lease[]): Promise<Set<string>> {
    const [res] = await db.$queryRawUnsafe<{ ids: string }[]>(this.claimTexts.groupRivals, ...leaseParams(leases));
    return new Set(parseIds(res.ids));
  }

  /**
   * Row-locks the leases still held and bounds the transaction's idle time and statements; returns
   * the ids held and the transaction's backend (for cancelStatement).
   */
  async lockLeases(tx: SqlExecutor, leases: Lease[], limits: { idleMs: number; statementMs: number }): Promise<{ held: Set<string>; backend: BatchBackend }> {
    assertOneLeasePerTask(leases);
    const [res] = await tx.$queryRawUnsafe<{ ids: string; backend_pid: number; xact_id: string }[]>(
      this.claimTexts.lockLeases,
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

  /** See CompletionRepository.complete. */
  complete(db: SqlExecutor, leases: RanLease[], followUps: NewTaskRow[]): Promise<CompleteResult> {
    return this.completions.complete(db, leases, followUps);
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

  /**
   * Gives leases back uncounted; returns the ids given back, and among them (`cancelled`) those
   * whose cancel was requested while they ran, ended cancelled instead (a row a business
   * transaction holds is not given back: its lease expires).
   */
  async release(db: SqlExecutor, leases: Lease[]): Promise<GivenBack> {
    const released = new GivenBack();
    if (leases.length === 0) return released;
    assertOneLeasePerTask(leases);
    await byLeaseWhenHeld(leases, async (part) => {
      released.addRows(await db.$queryRawUnsafe<GivenBackRow[]>(this.statementsFor(db).release, ...leaseParams(part), this.channel));
    });
    return released;
  }

  /**
   * Gives leases back as back-offs (backoff.sql.ts), in one statement: each due at its end,
   * uncounted, and its scope recorded; returns the ids given back, `cancelled` among them as in
   * release (a lease no longer held changes nothing). Outside a transaction a row a business transaction holds is waited for at most
   * ROW_LOCK_WAIT_MS: the others are written, and that lease's id goes in `held`, for the caller
   * to write again.
   */
  async backOff(db: SqlExecutor, backOffs: BackOff[], held?: Set<string>): Promise<GivenBack> {
    const released = new GivenBack();
    if (backOffs.length === 0) return released;
    assertOneLeasePerTask(backOffs);
    const stillHeld = await byLeaseWhenHeld(backOffs, async (part) => {
      released.addRows(await db.$queryRawUnsafe<GivenBackRow[]>(this.statementsFor(db).backOff, ...leaseParams(part), this.channel, backOffsJson(part)));
    });
    for (const b of stillHeld) held?.add(b.id);
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
    const { rescued, dead } = await this.rescuePass(db, limit);
    return { rescued, dead };
  }

  /**
   * rescueExpired for a rescuer pass: `owed` also says what the dependency settler has to do (see
   * rescueExpired in maintain.sql.ts), the debts this statement wrote included.
   */
  async rescuePass(db: SqlExecutor, limit = 1000): Promise<{ rescued: number; dead: number; owed: SettleScope }> {
    const [res] = await db.$queryRawUnsafe<{ rescued: number; dead: number; debts: number; fan_in_owed: boolean; children_owed: boolean; children_waiting: boolean }[]>(
      this.maintainSql.rescueExpired, limit, this.channel,
    );
    const wrote = res.debts > 0;
    return { rescued: res.rescued, dead: res.dead, owed: { fanIn: res.fan_in_owed || wrote, children: res.children_owed || wrote, sweep: res.children_waiting } };
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
