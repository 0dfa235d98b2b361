import type { TestDatabase } from './test-database';

/** The generic plan of a statement, as a prepared statement uses it after a few executions. */
export async function genericPlan(db: TestDatabase, sql: string, types: string[], args: string[]): Promise<string> {
  const client = db.prisma(1);
  try {
    return await client.$transaction(async (tx) => {
      await tx.$executeRawUnsafe('SET LOCAL plan_cache_mode = force_generic_plan');
      await tx.$executeRawUnsafe(`PREPARE plan_probe (${types.join(', ')}) AS ${sql}`);
      const plan = await tx.$queryRawUnsafe<{ 'QUERY PLAN': string }[]>(`EXPLAIN EXECUTE plan_probe (${args.join(', ')})`);
      await tx.$executeRawUnsafe('DEALLOCATE plan_probe');
      return plan.map((r) => r['QUERY PLAN']).join('\n');
    });
  } finally {
    await client.$disconnect();
  }
}
