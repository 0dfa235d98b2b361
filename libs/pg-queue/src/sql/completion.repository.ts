import { PgQueueError } from '../errors';
import { isRootClient } from '../prisma-adapter';
import type { SqlExecutor } from '../types';
import { inBoundedTransaction, type TransactionBounds } from './bounded-transaction';
import type { completeStatements } from './complete.sql';
import { byLeaseWhenHeld } from './held-rows';
import { DEPENDANTS_BOUNDS } from './insert.repository';
import { taskRowsJson } from './task-fields';
import { leaseParams, msList, parseIds, resultsJson, assertOneLeasePerTask, type CompleteResult, type NewTaskRow, type RanLease } from './statement-values';

/**
 * Bounds of the transaction that completes one lease-mode attempt with follow-ups that have
 * dependencies (see complete): those of enqueue with dependants, whose statements it runs after
 * the completion's, with more time per follow-up (one or two statements each).
 */
const FOLLOW_UP_BOUNDS: TransactionBounds = { ...DEPENDANTS_BOUNDS, perRowMs: 20 };

/** The error an attempt fails with when its follow-ups could not be inserted (see complete). */
function followUpsFailed(taskId: string, cause: unknown): PgQueueError {
  const reason = cause instanceof Error ? cause.message : String(cause);
  const err = new PgQueueError(`pg-queue: the follow-ups of task ${taskId} could not be enqueued, so its attempt fails: ${reason.replace(/^pg-queue: /, '')}`);
  err.cause = cause;
  return err;
}

/**
 * Runs the completion of lease-mode and transactional attempts (complete.sql.ts): the batch's
 * statement, the attempts whose follow-ups have dependencies, the second look for leases that
 * raced a rerun request, and, outside a transaction, the leases whose row a business transaction
 * holds (byLeaseWhenHeld).
 */
export class CompletionRepository {
  constructor(
    private readonly inTransaction: ReturnType<typeof completeStatements>,
    /** The same statements with row-lock waits bounded, for a statement that commits on its own. */
    private readonly outside: ReturnType<typeof completeStatements>,
    private readonly channel: string,
    /** Finished tasks are archived (the completion then records run times). */
    private readonly archives: boolean,
    private readonly insert: (db: SqlExecutor, rows: NewTaskRow[]) => Promise<string[]>,
  ) {}

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
    await db.$executeRawUnsafe(this.inTransaction.followUpsSavepoint);
    let value: T;
    try {
      value = await work(db);
    } catch (error) {
      await db.$executeRawUnsafe(this.inTransaction.followUpsRollback);
      await db.$executeRawUnsafe(this.inTransaction.followUpsRelease);
      return { error };
    }
    await db.$executeRawUnsafe(this.inTransaction.followUpsRelease);
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
      (isRootClient(db) ? this.outside : this.inTransaction).complete,
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
}

/**
 * How many characters of handler results and follow-up payloads one completion statement carries
 * at most (besides a single lease over it, which goes alone): the statement parses them as jsonb,
 * whose objects and arrays stop at 256 MB, and holds them in memory. Characters, not bytes (one to
 * three each in UTF-8): counting them is free and the bound stays well under the limit.
 */
const COMPLETION_CHARS = 32 * 1024 * 1024;

/** `leases` in runs of at most COMPLETION_CHARS of results and follow-up payloads each; almost always one run. */
export function byCompletionBytes(leases: RanLease[], followUps: NewTaskRow[]): RanLease[][] {
  let total = 0;
  for (const l of leases) total += l.result?.length ?? 0;
  for (const f of followUps) total += f.payloadJson.length;
  if (total <= COMPLETION_CHARS) return [leases];
  const followUpChars = new Map<string, number>();
  for (const f of followUps) followUpChars.set(f.parentId!, (followUpChars.get(f.parentId!) ?? 0) + f.payloadJson.length);
  const parts: RanLease[][] = [[]];
  let chars = 0;
  for (const l of leases) {
    const size = (l.result?.length ?? 0) + (followUpChars.get(l.id) ?? 0);
    if (chars + size > COMPLETION_CHARS && parts[parts.length - 1].length > 0) {
      parts.push([]);
      chars = 0;
    }
    parts[parts.length - 1].push(l);
    chars += size;
  }
  return parts;
}
