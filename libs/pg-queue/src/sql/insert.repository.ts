import { dependantOrder } from '../core/dependency-order';
import { PgQueueError } from '../errors';
import type { SqlExecutor } from '../types';
import { inBoundedTransaction, type TransactionBounds } from './bounded-transaction';
import { debounceStatements } from './debounce.sql';
import type { DependencyRepository } from './dependencies.repository';
import { enqueueStatements, weightStatements, type ConflictMode } from './enqueue.sql';
import { leanTaskColumns, parseIds, type NewTaskRow } from './statement-values';
import { taskRowsJson } from './task-fields';
import { isRootClient } from '../prisma-adapter';


type InsertPart = ConflictMode | 'plain' | 'debounce' | 'dependant';

/** Rows of one enqueue call, split by the statement that inserts them, with their input positions. */
function splitByConflictMode(rows: NewTaskRow[]): Map<InsertPart, { index: number; row: NewTaskRow }[]> {
  const parts = new Map<InsertPart, { index: number; row: NewTaskRow }[]>();
  rows.forEach((row, index) => {
    const part = row.dependsOn !== null ? 'dependant' : row.debounce !== null ? 'debounce' : row.dedupKey === null ? 'plain' : row.onConflict;
    const list = parts.get(part);
    if (list) list.push({ index, row });
    else parts.set(part, [{ index, row }]);
  });
  return parts;
}

const MAX_KEYED_RETRIES = 5;

/**
 * How long an enqueue that opened its own transaction waits for a partition's weight row that
 * another transaction is changing (a `{ tx }` enqueue of a new weight that has not committed).
 */
const WEIGHT_LOCK_WAIT_MS = 2000;

/** The enqueue option `weight` of the rows as JSON for setWeights (the last per queue and partition), or null when none has one. */
function partitionWeights(rows: NewTaskRow[]): string | null {
  const last = new Map<string, { queue: string; p: string; w: number }>();
  for (const r of rows) {
    if (r.weight != null && r.partitionKey !== null) last.set(`${r.queue}\u0000${r.partitionKey}`, { queue: r.queue, p: r.partitionKey, w: r.weight });
  }
  return last.size === 0 ? null : JSON.stringify([...last.values()]);
}

/**
 * Bounds of the transaction of an enqueue call with dependants, when it opens its own (see insert;
 * within a caller's `{ tx }` the caller's limits apply). The dependants take a constant number of
 * statements, but each one's work grows with the rows, and a debounced row still takes a
 * statement (a round trip) of its own. Their links wait for their parents' row locks, held by a
 * completion, or by a business transaction that enqueued a dependant of the same parent: a lock
 * wait gives up after `lockWaitMs` rather than hold the caller (and a pool connection) as long
 * as that transaction lasts.
 */
export const DEPENDANTS_BOUNDS: TransactionBounds = { maxWaitMs: 5000, lockWaitMs: 10_000, idleMs: 5000, statementMs: 15_000, transactionMs: 20_000, perRowMs: 5 };

/**
 * Enqueue's inserts (TaskRepository.insert): plain rows in one statement; keyed rows by conflict
 * mode; debounced rows one statement each; dependants last, linked to their parents (see
 * DependencyRepository).
 */
export class TaskInserter {
  private readonly enqueueSql;
  private readonly debounceSql;
  private readonly weightSql: string;

  constructor(
    schema: string,
    private readonly channel: string,
    private readonly dependencies: DependencyRepository,
  ) {
    this.enqueueSql = enqueueStatements(schema);
    this.weightSql = weightStatements(schema).set;
    this.debounceSql = debounceStatements(schema);
  }

  /**
   * Inserts tasks and returns their ids in input order; for a live dedup key, the existing task's
   * id. Several statements (plain rows and each conflict mode) run in one transaction: the caller's
   * when `db` is a transaction client, else a new one.
   */
  async insert(db: SqlExecutor, rows: NewTaskRow[]): Promise<string[]> {
    if (rows.length === 0) return [];
    const parts = splitByConflictMode(rows);
    const weights = partitionWeights(rows);
    if (parts.size === 1 && parts.has('plain') && weights === null) return this.insertPlain(db, rows);
    const dependants = parts.has('dependant') ? dependantOrder(rows) : [];
    // Debounced rows take a statement each; dependants three or four in all; weights one.
    const oneStatement = parts.size === 1 && dependants.length === 0 && weights === null && (parts.get('debounce')?.length ?? 1) === 1;
    const own = !oneStatement && isRootClient(db);
    const run = (tx: SqlExecutor) => this.insertParts(tx, rows, parts, dependants, weights, own);
    if (own) {
      if (dependants.length === 0) return db.$transaction(run);
      return inBoundedTransaction(db, 'enqueue with dependsOn', DEPENDANTS_BOUNDS, rows.length, run);
    }
    return run(db);
  }

  private async insertPlain(db: SqlExecutor, rows: NewTaskRow[]): Promise<string[]> {
    const lean = leanTaskColumns(rows);
    const [res] = lean
      ? await db.$queryRawUnsafe<{ ids: string }[]>(this.enqueueSql.insertManyLean, ...lean, this.channel)
      : await db.$queryRawUnsafe<{ ids: string }[]>(this.enqueueSql.insertMany, taskRowsJson(rows), this.channel);
    return parseIds(res.ids);
  }

  private async insertParts(
    db: SqlExecutor, rows: NewTaskRow[], parts: ReturnType<typeof splitByConflictMode>, dependants: number[], weights: string | null, own: boolean,
  ): Promise<string[]> {
    // First: a weight that waits for a row lock does so before any task row is written.
    if (weights !== null) await db.$executeRawUnsafe(this.weightSql, weights, own ? String(WEIGHT_LOCK_WAIT_MS) : null);
    const ids: string[] = new Array(rows.length);
    for (const [mode, part] of parts) {
      if (mode === 'dependant') {
        continue; // last: they may name the other rows
      } else if (mode === 'plain') {
        const got = await this.insertPlain(db, part.map((p) => p.row));
        part.forEach((p, i) => (ids[p.index] = got[i]));
      } else if (mode === 'debounce') {
        // One statement per request: each folds into what the previous one left (see debounce.sql.ts).
        for (const p of part) ids[p.index] = await this.insertDebounced(db, p.row);
      } else {
        await this.insertKeyed(db, mode, part, ids);
      }
    }
    if (dependants.length > 0) await this.dependencies.insertDependants(db, rows, dependants, ids);
    return ids;
  }

  private async insertDebounced(db: SqlExecutor, row: NewTaskRow): Promise<string> {
    const d = row.debounce!;
    const [res] = await db.$queryRawUnsafe<{ id: string }[]>(
      this.debounceSql.debounce, taskRowsJson([row]), this.channel, d.key, d.delayMs, d.maxDelayMs, d.leading,
    );
    return res.id;
  }

  /**
   * A conflicting task that committed after the statement's snapshot is invisible to it and comes
   * back without an id; such rows are simply sent again (the key is then either visible or free).
   * replace/rerun may not touch one row twice in a statement, so duplicates in the input collapse
   * onto their last occurrence.
   */
  private async insertKeyed(db: SqlExecutor, mode: ConflictMode, part: { index: number; row: NewTaskRow }[], ids: string[]): Promise<void> {
    const last = new Map<string, { index: number; row: NewTaskRow }>();
    for (const p of part) last.set(`${p.row.queue}\u0000${p.row.dedupKey}`, p);
    let todo = mode === 'ignore' ? part : [...last.values()];
    for (let attempt = 0; todo.length > 0; attempt++) {
      if (attempt === MAX_KEYED_RETRIES) throw new PgQueueError(`pg-queue: could not settle dedup keys after ${attempt} tries`);
      const res = await db.$queryRawUnsafe<{ id: string | null }[]>(this.enqueueSql.keyed[mode], taskRowsJson(todo.map((p) => p.row)), this.channel);
      const missing: typeof todo = [];
      todo.forEach((p, i) => (res[i].id === null ? missing.push(p) : (ids[p.index] = res[i].id!)));
      todo = missing;
    }
    for (const p of part) ids[p.index] ??= ids[last.get(`${p.row.queue}\u0000${p.row.dedupKey}`)!.index];
  }
}
