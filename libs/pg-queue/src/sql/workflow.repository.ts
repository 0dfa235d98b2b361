import type { PrismaClientLike, SqlExecutor } from '../types';
import { isLockTimeout } from './database-error';
import { workflowStatements } from './workflow.sql';
import type { Lease } from './statement-values';

/** A journal row as loaded (see workflow/journal.ts for the meaning). */
export interface JournalRow {
  seq: number;
  kind: string;
  name: string;
  outcome: 'ok' | 'error' | 'waiting';
  result: any;
  /** False: tentative, forgotten if an attempt fails before the workflow parks (see forgetTentative). */
  kept?: boolean;
  /** True: `result` was left out of the load (see journals), read with `result` when the call replays. */
  deferred?: boolean;
}

/** How many bytes of large results (as stored) an attempt's journal load reads at most per workflow; the rest on replay. */
export const JOURNAL_LOAD_BYTES = 256 * 1024;

export interface ParkRequest {
  /** 'sleep', 'signal:<name>', 'child:<id>'. */
  waitingFor: string;
  /** Epoch ms, or null: no time bound. */
  wakeAt: number | null;
  /** For a signal wait: its name (the park takes the signal lock and checks for one). */
  signal: string | null;
  /** For a child wait: the position of its entry. */
  childSeq: number | null;
  /** Whether the park keeps the tentative journal entries (see forgetTentative): false when a failure came after the park was asked for. */
  keep: boolean;
}

/** How long a park waits for the signal lock (a signal sent in a transaction still open holds it). */
const SIGNAL_LOCK_WAIT_MS = 2000;
/** Bounds of the transactions opened here: the wait for a connection, and the whole. */
const TX_BOUNDS = { maxWait: 5000, timeout: 10_000 } as const;

/** Runs the statements of durable workflows (see workflow.sql.ts). */
export class WorkflowRepository {
  private readonly sql;

  constructor(
    schema: string,
    private readonly channel: string,
  ) {
    this.sql = workflowStatements(schema);
  }

  /** The journals of `taskIds`, by task id (a task without entries is absent). */
  async journals(db: SqlExecutor, taskIds: string[]): Promise<Map<string, JournalRow[]>> {
    const rows = await db.$queryRawUnsafe<(JournalRow & { task_id: string })[]>(this.sql.journals, taskIds.join(','), JOURNAL_LOAD_BYTES);
    const out = new Map<string, JournalRow[]>();
    for (const { task_id, ...row } of rows) {
      const entries = out.get(task_id);
      if (entries) entries.push(row);
      else out.set(task_id, [row]);
    }
    return out;
  }

  /** The result of journal entry `seq` of the lease's task (one the load deferred); null when the lease is no longer held. */
  async result(db: SqlExecutor, lease: Lease, seq: number): Promise<{ result: any } | null> {
    const rows = await db.$queryRawUnsafe<{ result: unknown }[]>(this.sql.result, lease.id, seq, lease.token);
    return rows[0] ?? null;
  }

  /** Records a call; false when the lease is no longer held. `resultJson`: JSON text or null. */
  async record(db: SqlExecutor, lease: Lease, seq: number, kind: string, name: string, outcome: 'ok' | 'error' | 'waiting', resultJson: string | null, sinceMs: number): Promise<boolean> {
    const rows = await db.$queryRawUnsafe<unknown[]>(this.sql.record, lease.id, lease.token, seq, kind, name, outcome, resultJson, sinceMs);
    return rows.length === 1;
  }

  /** Records many calls in one statement (see recordMany); returns the entries written, as `${taskId}/${seq}`. */
  async recordMany(db: SqlExecutor, entries: readonly JournalRecord[]): Promise<Set<string>> {
    const rows = [...entries]
      .sort((x, y) => (BigInt(x.lease.id) < BigInt(y.lease.id) ? -1 : BigInt(x.lease.id) > BigInt(y.lease.id) ? 1 : 0))
      .map((e) => ({ id: e.lease.id, token: e.lease.token, seq: e.seq, kind: e.kind, name: e.name, outcome: e.outcome, result: e.resultJson, since_ms: e.sinceMs, kept: e.kept ?? true }));
    const written = await db.$queryRawUnsafe<{ task_id: string; seq: number }[]>(this.sql.recordMany, JSON.stringify(rows));
    return new Set(written.map((w) => `${w.task_id}/${w.seq}`));
  }

  async resolve(db: SqlExecutor, lease: Lease, seq: number, outcome: 'ok' | 'error', resultJson: string): Promise<boolean> {
    const rows = await db.$queryRawUnsafe<unknown[]>(this.sql.resolve, lease.id, lease.token, seq, outcome, resultJson);
    return rows.length === 1;
  }

  /** A signal wait (see takeSignal in workflow.sql.ts): `took` with its payload, or the wait's deadline (ISO text, null: none). */
  async takeSignal(db: SqlExecutor, lease: Lease, seq: number, name: string, timeoutMs: number | null): Promise<{ held: boolean; took: boolean; payload: unknown; until: string | null; nowMs: number }> {
    const [row] = await db.$queryRawUnsafe<{ held: boolean; took: boolean; payload: unknown; until: string | null; now_ms: number }[]>(
      this.sql.takeSignal, lease.id, lease.token, seq, name, timeoutMs,
    );
    return { held: row.held, took: row.took, payload: row.payload, until: row.until, nowMs: row.now_ms };
  }

  /**
   * Parks the workflow; returns its state after ('waiting', or 'pending' when what it waits for
   * came already), or null when the lease is lost or a cancel request waits. A signal park that
   * cannot take the signal lock in time returns the task to pending instead (see workflow.sql.ts).
   */
  async park(prisma: PrismaClientLike, lease: Lease, p: ParkRequest): Promise<'waiting' | 'pending' | null> {
    const params = [lease.id, lease.token, p.waitingFor, p.wakeAt === null ? null : new Date(p.wakeAt), p.signal, p.childSeq, this.channel, p.keep] as const;
    if (p.signal === null) return this.parked(prisma, params);
    try {
      return await prisma.$transaction(async (tx) => {
        await tx.$queryRawUnsafe(this.sql.lockSignals, lease.id, String(SIGNAL_LOCK_WAIT_MS));
        return this.parked(tx, params);
      }, TX_BOUNDS);
    } catch (err) {
      if (!isLockTimeout(err)) throw err;
      // A signal transaction held the lock past the bound: park as due, the replay looks again.
      // (If the row's lock timed out instead, this times out too and the caller tries again.)
      return this.parked(prisma, [lease.id, lease.token, p.waitingFor, new Date(0), null, null, this.channel, p.keep]);
    }
  }

  private async parked(db: SqlExecutor, params: readonly unknown[]): Promise<'waiting' | 'pending' | null> {
    const rows = await db.$queryRawUnsafe<{ state: 'waiting' | 'pending' }[]>(this.sql.park, ...params);
    return rows[0]?.state ?? null;
  }

  forgetTentative(db: SqlExecutor, lease: Lease): Promise<number> {
    return db.$executeRawUnsafe(this.sql.forgetTentative, lease.id, lease.token) as Promise<number>;
  }

  linkChild(db: SqlExecutor, parentId: string, childId: string): Promise<number> {
    return db.$executeRawUnsafe(this.sql.linkChild, parentId, childId) as Promise<number>;
  }

  /**
   * Sends a signal through `db` (a transaction: the caller's, or one opened here); returns the
   * signal id, or the state of a target that cannot take it ('done', 'cancelled', or null: unknown).
   */
  async send(db: SqlExecutor, taskId: string, name: string, payloadJson: string): Promise<{ id: string } | { state: string | null }> {
    const [row] = await db.$queryRawUnsafe<{ id: string | null; state: string | null }[]>(this.sql.send, taskId, name, payloadJson);
    return row.id !== null ? { id: row.id } : { state: row.state };
  }

  /** Wakes due parked workflows of `queues` (up to `limit`); returns how many, and the next wake time. */
  async wakeDue(db: SqlExecutor, queues: string[], limit: number): Promise<{ woke: number; nextMs: number | null }> {
    const [row] = await db.$queryRawUnsafe<{ woke: number; next_ms: number | null }[]>(this.sql.wakeDue, queues, limit, this.channel);
    return { woke: row.woke, nextMs: row.next_ms };
  }

  async wakeAllNow(db: SqlExecutor, queues: string[]): Promise<number> {
    const [row] = await db.$queryRawUnsafe<{ parked: number }[]>(this.sql.wakeAllNow, queues);
    return row.parked;
  }

}

export { TX_BOUNDS as WORKFLOW_TX_BOUNDS };

/** A call to journal (WorkflowRepository.record's arguments): `resultJson` JSON text or null, `sinceMs` since the call started. */
export interface JournalRecord {
  lease: Lease;
  seq: number;
  kind: string;
  name: string;
  outcome: 'ok' | 'error' | 'waiting';
  resultJson: string | null;
  sinceMs: number;
  /** False: a tentative entry (see forgetTentative); default true. */
  kept?: boolean;
}
