import { DependencyNotFoundError } from '../errors';
import type { SqlExecutor } from '../types';
import { databaseError } from './database-error';
import { dependencyStatements } from './dependencies.sql';
import { parseIds, type NewTaskRow } from './statement-values';
import { taskRowsJson } from './task-fields';
import { workflowStatements } from './workflow.sql';

/** How many debts one settle statement takes; a cascade of cancellations settles level by level. */
const SETTLE_BATCH = 1000;
/** How many bytes of results (as stored) one settle statement reads at most, beyond its first debt. */
const SETTLE_BYTES = 32 * 1024 * 1024;

interface Settled {
  taken: number;
  settled: number;
  cascaded: number;
}

/**
 * Whether a settle statement failed because of what it settles (data it cannot store: a merged
 * parent_results over jsonb's limit, ...), not because of the moment (connection, deadlock,
 * timeout, cancellation, resources): only then is the debt at fault looked for and quarantined.
 */
function dataFault(err: unknown): { message: string } | null {
  const db = databaseError(err);
  if (db === null || ['08', '25', '40', '53', '55', '57', '58'].includes(db.code.slice(0, 2))) return null;
  return db;
}

/** How many children an older instance ended one rescuer pass records at most (sweepChildEnds). */
const SWEEP_CHILDREN = 1000;

/**
 * What a settle round does: settle fan-in debts, settle children's ends, and (a rescuer pass with
 * workflows waiting for children) first sweep for ends an older release left without a debt.
 */
export interface SettleScope {
  fanIn: boolean;
  children: boolean;
  sweep: boolean;
}

/** A round on a `!settle` notification: both kinds of debt, no sweep. */
export const SETTLE_DEBTS: SettleScope = { fanIn: true, children: true, sweep: false };

/** Runs the statements of fan-in dependencies (see dependencies.sql.ts) and of workflow children's ends. */
export class DependencyRepository {
  private readonly sql;
  private readonly children;

  constructor(
    schema: string,
    private readonly channel: string,
  ) {
    this.sql = dependencyStatements(schema);
    const { settleChildren, sweepChildEnds } = workflowStatements(schema);
    this.children = { settleChildren, sweepChildEnds };
  }

  /**
   * Inserts the rows that have dependsOn, in `order` (see dependantOrder), after the call's other
   * rows: `ids` holds those rows' ids and receives these. Every named task must exist, checked
   * before the insert. A constant number of statements, whatever the number of rows (see
   * insertDependants in dependencies.sql.ts); run inside a transaction.
   */
  async insertDependants(db: SqlExecutor, rows: readonly NewTaskRow[], order: number[], ids: string[]): Promise<void> {
    const named = [...new Set(order.flatMap((i) => rows[i].dependsOn!.flatMap((ref) => ('id' in ref ? [ref.id] : []))))];
    await this.assertExist(db, named);
    // Rows of the call that have dependsOn are named by position in the statement's input; the others have ids already.
    const position = new Map(order.map((index, k) => [index, k + 1]));
    const outer: string[] = [];
    const inner: string[] = [];
    order.forEach((index, k) => {
      for (const ref of rows[index].dependsOn!) {
        const internal = 'item' in ref ? position.get(ref.item) : undefined;
        if (internal !== undefined) inner.push(`{"c":${k + 1},"i":${internal}}`);
        else outer.push(`{"c":${k + 1},"p":${JSON.stringify('id' in ref ? ref.id : ids[ref.item])}}`);
      }
    });
    const [res] = await db.$queryRawUnsafe<{ ids: string; unsettled_dependants: string; unsettled_parents: string }[]>(
      this.sql.insertDependants, taskRowsJson(order.map((i) => rows[i])), this.channel, `[${outer.join(',')}]`, `[${inner.join(',')}]`,
    );
    parseIds(res.ids).forEach((id, k) => (ids[order[k]] = id));
    // Parents that ended while these rows went in: how they ended is read with a fresh snapshot.
    if (res.unsettled_dependants !== '') {
      await db.$queryRawUnsafe(this.sql.debtsOfEnded, res.unsettled_dependants, res.unsettled_parents, this.channel);
    }
  }

  /** Throws DependencyNotFoundError unless every task in `ids` exists, live or archived. */
  async assertExist(db: SqlExecutor, ids: readonly string[]): Promise<void> {
    if (ids.length === 0) return;
    const [missing] = await db.$queryRawUnsafe<{ ids: string }[]>(this.sql.missingParents, ids.join(','));
    if (missing.ids !== '') throw new DependencyNotFoundError(parseIds(missing.ids));
  }

  /**
   * Settles every dependency debt (cascades included), then every workflow child's end, as far as
   * `scope` asks; returns how many were settled. A batch that fails on its data is bisected down to
   * the debt at fault, which is quarantined (its dependant ends dead with the error): one such debt
   * never holds up the others. `sweep`: first records the ends of children that an instance of an
   * older release ended without a debt (see sweepChildEnds), then settles them.
   */
  async settle(db: SqlExecutor, scope: SettleScope = SETTLE_DEBTS): Promise<number> {
    // A sweep that fails (a timeout, a busy database) does not keep the debts below from settling.
    let sweepError: unknown = null;
    let swept = 0;
    if (scope.sweep) {
      await Promise.resolve(db.$queryRawUnsafe<{ recorded: number }[]>(this.children.sweepChildEnds, SWEEP_CHILDREN, this.channel)).then(
        ([res]) => (swept = res.recorded),
        (err: unknown) => (sweepError = err),
      );
    }
    let total = scope.fanIn ? await this.settleFanIn(db) : 0;
    if (scope.children || swept > 0) total += await this.settleChildren(db);
    if (sweepError) throw sweepError;
    return total;
  }

  private async settleChildren(db: SqlExecutor): Promise<number> {
    let total = 0;
    for (;;) {
      const [res] = await db.$queryRawUnsafe<{ taken: number; settled: number }[]>(this.children.settleChildren, SETTLE_BATCH, this.channel, SETTLE_BYTES);
      total += res.settled;
      if (res.taken < SETTLE_BATCH && res.settled === res.taken) return total;
    }
  }

  private async settleFanIn(db: SqlExecutor): Promise<number> {
    let total = 0;
    // After a statement failed on its data, the next ones wait for the debts it locked (see settleWaiting).
    let waiting = false;
    for (;;) {
      let res: Settled;
      try {
        res = await this.settleBatch(db, SETTLE_BATCH, null, waiting);
        waiting = false;
      } catch (err) {
        if (dataFault(err) === null) throw err;
        waiting = true;
        const [oldest] = await db.$queryRawUnsafe<{ ids: string }[]>(this.sql.oldestDebts, SETTLE_BATCH);
        res = await this.settleIsolating(db, parseIds(oldest.ids));
        res.taken = SETTLE_BATCH; // look again: the statement that failed may have taken other debts
      }
      total += res.settled;
      if (res.taken < SETTLE_BATCH && res.settled === res.taken && res.cascaded === 0) return total;
    }
  }

  private async settleBatch(db: SqlExecutor, limit: number, ids: string[] | null, waiting: boolean): Promise<Settled> {
    const [res] = await db.$queryRawUnsafe<Settled[]>(
      waiting ? this.sql.settleWaiting : this.sql.settle, limit, this.channel, ids === null ? null : ids.join(','), SETTLE_BYTES,
    );
    return res;
  }

  /** Settles the debts `ids` in halves, down to the one a statement cannot settle, which is quarantined. */
  private async settleIsolating(db: SqlExecutor, ids: string[]): Promise<Settled> {
    if (ids.length === 0) return { taken: 0, settled: 0, cascaded: 0 };
    try {
      return await this.settleBatch(db, ids.length, ids, true);
    } catch (err) {
      const fault = dataFault(err);
      if (fault === null) throw err;
      if (ids.length === 1) {
        const [res] = await db.$queryRawUnsafe<{ settled: number; cascaded: number }[]>(this.sql.quarantine, ids[0], fault.message, this.channel);
        return { taken: 1, settled: res.settled, cascaded: res.cascaded };
      }
      const half = Math.ceil(ids.length / 2);
      const first = await this.settleIsolating(db, ids.slice(0, half));
      const second = await this.settleIsolating(db, ids.slice(half));
      return { taken: first.taken + second.taken, settled: first.settled + second.settled, cascaded: first.cascaded + second.cascaded };
    }
  }

  /** The results of task `id`'s done parents, by parent id. */
  async parentResults(db: SqlExecutor, id: string): Promise<Record<string, unknown>> {
    const rows = await db.$queryRawUnsafe<{ results: Record<string, unknown> }[]>(this.sql.parentResults, id);
    return rows[0]?.results ?? {};
  }
}
