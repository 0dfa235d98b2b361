import type { SqlExecutor } from '../types';
import { claimStatements } from './claim.sql';
import { completeStatements, type FinishedRetention } from './complete.sql';
import { enqueueStatements } from './enqueue.sql';
import { notifyChannel } from './identifiers';
import { inspectStatements } from './inspect.sql';
import { maintainStatements } from './maintain.sql';

/** A row to insert; the payload is already serialised and size-checked. */
export interface NewTaskRow {
  queue: string;
  payloadJson: string;
  priority: number;
  runAt: Date | null;
  delayMs: number;
  maxAttempts: number;
  parentId: string | null;
}

export interface ClaimedRow {
  id: string;
  queue: string;
  payload: unknown;
  priority: number;
  run_at: Date;
  attempt: number;
  max_attempts: number;
  created_at: Date;
  lease_token: string;
  parent_id: string | null;
}

export interface Lease {
  id: string;
  token: string;
}

export interface Failure extends Lease {
  error: string;
  delayMs: number;
  fatal: boolean;
}

export interface TaskRow {
  id: string;
  queue: string;
  state: 'pending' | 'running' | 'dead' | 'done' | 'cancelled';
  payload: unknown;
  priority: number;
  run_at: Date;
  attempt: number;
  max_attempts: number;
  last_error: string | null;
  locked_by: string | null;
  locked_until: Date | null;
  parent_id: string | null;
  created_at: Date;
  started_at: Date | null;
  finished_at: Date | null;
}

/** Parallel arrays for the unnest-based inserts; column order matches the statements. */
function taskColumns(rows: NewTaskRow[]): unknown[] {
  return [
    rows.map((r) => r.queue),
    rows.map((r) => r.payloadJson),
    rows.map((r) => r.priority),
    rows.map((r) => (r.runAt ? r.runAt.toISOString() : null)),
    rows.map((r) => r.delayMs),
    rows.map((r) => r.maxAttempts),
    rows.map((r) => r.parentId),
  ];
}

/**
 * The only place that runs the queue's SQL. Statement texts are built once per schema; every value
 * is a bound parameter. Each method takes the executor to run on: the PrismaClient for a statement
 * that commits on its own, or a transaction client to join the caller's transaction.
 */
export class TaskRepository {
  private readonly enqueueSql;
  private readonly claimSql;
  private readonly completeSql;
  private readonly maintainSql;
  private readonly inspectSql;
  readonly channel: string;

  constructor(readonly schema: string, retention: FinishedRetention) {
    this.enqueueSql = enqueueStatements(schema);
    this.claimSql = claimStatements(schema);
    this.completeSql = completeStatements(schema, retention);
    this.maintainSql = maintainStatements(schema);
    this.inspectSql = inspectStatements(schema);
    this.channel = notifyChannel(schema);
  }

  async insert(db: SqlExecutor, rows: NewTaskRow[]): Promise<string[]> {
    if (rows.length === 0) return [];
    const [res] = await db.$queryRawUnsafe<{ ids: string[] }[]>(this.enqueueSql.insertMany, ...taskColumns(rows), this.channel);
    return res.ids;
  }

  claim(db: SqlExecutor, queue: string, limit: number, workerId: string, leaseMs: number): PromiseLike<ClaimedRow[]> {
    return db.$queryRawUnsafe<ClaimedRow[]>(this.claimSql.claim, queue, limit, workerId, leaseMs);
  }

  /** Row-locks the leases still held; returns the ids that are. */
  async lockLeases(tx: SqlExecutor, leases: Lease[], idleLimitMs: number): Promise<Set<string>> {
    const rows = await tx.$queryRawUnsafe<{ id: string }[]>(
      this.claimSql.lockLeases,
      leases.map((l) => l.id),
      leases.map((l) => l.token),
      String(Math.ceil(idleLimitMs)),
    );
    return new Set(rows.map((r) => r.id));
  }

  /** Completes the leases still held and inserts their follow-ups; returns the completed ids. */
  async complete(db: SqlExecutor, leases: Lease[], followUps: NewTaskRow[]): Promise<Set<string>> {
    if (leases.length === 0) return new Set();
    const [res] = await db.$queryRawUnsafe<{ done_ids: string[] }[]>(
      this.completeSql.complete,
      leases.map((l) => l.id),
      leases.map((l) => l.token),
      ...taskColumns(followUps),
      this.channel,
    );
    return new Set(res.done_ids);
  }

  /** Records failed attempts; returns the new state of each task whose lease still held. */
  async fail(db: SqlExecutor, failures: Failure[]): Promise<Map<string, 'pending' | 'dead'>> {
    if (failures.length === 0) return new Map();
    const rows = await db.$queryRawUnsafe<{ id: string; state: 'pending' | 'dead' }[]>(
      this.completeSql.fail,
      failures.map((f) => f.id),
      failures.map((f) => f.token),
      failures.map((f) => f.error),
      failures.map((f) => Math.max(0, Math.round(f.delayMs))),
      failures.map((f) => f.fatal),
    );
    return new Map(rows.map((r) => [r.id, r.state]));
  }

  async release(db: SqlExecutor, leases: Lease[]): Promise<Set<string>> {
    if (leases.length === 0) return new Set();
    const [res] = await db.$queryRawUnsafe<{ released_ids: string[] }[]>(
      this.completeSql.release,
      leases.map((l) => l.id),
      leases.map((l) => l.token),
      this.channel,
    );
    return new Set(res.released_ids);
  }

  async heartbeat(db: SqlExecutor, leases: Lease[], leaseMs: number): Promise<Set<string>> {
    if (leases.length === 0) return new Set();
    const rows = await db.$queryRawUnsafe<{ id: string }[]>(
      this.completeSql.heartbeat,
      leases.map((l) => l.id),
      leases.map((l) => l.token),
      leaseMs,
    );
    return new Set(rows.map((r) => r.id));
  }

  async rescueExpired(db: SqlExecutor, limit = 1000): Promise<{ rescued: number; dead: number }> {
    const [res] = await db.$queryRawUnsafe<{ rescued: number; dead: number }[]>(this.maintainSql.rescueExpired, limit, this.channel);
    return { rescued: res.rescued, dead: res.dead };
  }

  stats(db: SqlExecutor) {
    return db.$queryRawUnsafe<{ queue: string; state: string; count: number; oldest_pending_ms: number | null }[]>(this.inspectSql.stats);
  }

  async get(db: SqlExecutor, id: string): Promise<TaskRow | null> {
    const rows = await db.$queryRawUnsafe<TaskRow[]>(this.inspectSql.get, id);
    return rows[0] ?? null;
  }
}
