import type { TestDatabase } from './test-database';

/** A node of an EXPLAIN (FORMAT JSON) plan, with the fields specs read. */
export interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  Alias?: string;
  'Index Name'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  Plans?: PlanNode[];
}

/** The node and every node under it. */
export const planNodes = (n: PlanNode): PlanNode[] => [n, ...(n.Plans ?? []).flatMap(planNodes)];

/**
 * EXPLAIN ANALYZE of `sql` run with `args` (SQL literals) on its generic plan, as a prepared
 * statement settles on it; rolled back, so the statement's writes leave nothing behind.
 */
export async function analyzedGenericPlan(db: TestDatabase, sql: string, args: string[]): Promise<PlanNode> {
  await db.sql('BEGIN');
  try {
    await db.sql('SET LOCAL plan_cache_mode = force_generic_plan');
    await db.sql(`PREPARE analyzed_probe AS ${sql}`);
    const [r] = await db.sql<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(`EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE analyzed_probe (${args.join(', ')})`);
    return r['QUERY PLAN'][0].Plan;
  } finally {
    await db.sql('ROLLBACK');
    await db.sql('DEALLOCATE ALL');
  }
}
