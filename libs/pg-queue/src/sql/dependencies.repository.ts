import { DependencyNotFoundError } from '../errors';
import type { SqlExecutor } from '../types';
import { dependencyStatements } from './dependencies.sql';
import { parseIds, taskRowsJson, type NewTaskRow } from './statement-values';

/** How many debts one settle statement takes; a cascade of cancellations settles level by level. */
const SETTLE_BATCH = 1000;

/** Runs the statements of fan-in dependencies (see dependencies.sql.ts). */
export class DependencyRepository {
  private readonly sql;

  constructor(
    schema: string,
    private readonly channel: string,
  ) {
    this.sql = dependencyStatements(schema);
  }

  /**
   * Inserts the rows that have dependsOn, in `order` (see dependantOrder), after the call's other
   * rows: `ids` holds those rows' ids and receives these. Every named task must exist, checked
   * before the first insert. Run inside a transaction (several statements).
   */
  async insertDependants(db: SqlExecutor, rows: readonly NewTaskRow[], order: number[], ids: string[]): Promise<void> {
    const named = [...new Set(order.flatMap((i) => rows[i].dependsOn!.flatMap((ref) => ('id' in ref ? [ref.id] : []))))];
    await this.assertExist(db, named);
    for (const index of order) {
      const parents = rows[index].dependsOn!.map((ref) => ('id' in ref ? ref.id : ids[ref.item]));
      const [res] = await db.$queryRawUnsafe<{ id: string; unsettled: string }[]>(
        this.sql.insertDependant, taskRowsJson([rows[index]]), this.channel, parents.join(','),
      );
      ids[index] = res.id;
      // A parent that ended while this row went in: how it ended is read with a fresh snapshot.
      if (res.unsettled !== '') await db.$queryRawUnsafe(this.sql.debtsOfEnded, res.id, res.unsettled, this.channel);
    }
  }

  /** Throws DependencyNotFoundError unless every task in `ids` exists, live or archived. */
  async assertExist(db: SqlExecutor, ids: readonly string[]): Promise<void> {
    if (ids.length === 0) return;
    const [missing] = await db.$queryRawUnsafe<{ ids: string }[]>(this.sql.missingParents, ids.join(','));
    if (missing.ids !== '') throw new DependencyNotFoundError(parseIds(missing.ids));
  }

  /** Settles every dependency debt (cascades included); returns how many were settled. */
  async settle(db: SqlExecutor): Promise<number> {
    let total = 0;
    for (;;) {
      const [res] = await db.$queryRawUnsafe<{ settled: number; cascaded: number }[]>(this.sql.settle, SETTLE_BATCH, this.channel);
      total += res.settled;
      if (res.settled < SETTLE_BATCH && res.cascaded === 0) return total;
    }
  }

  /** The results of task `id`'s done parents, by parent id. */
  async parentResults(db: SqlExecutor, id: string): Promise<Record<string, unknown>> {
    const rows = await db.$queryRawUnsafe<{ results: Record<string, unknown> }[]>(this.sql.parentResults, id);
    return rows[0]?.results ?? {};
  }
}
