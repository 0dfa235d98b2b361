import type { TestDatabase } from './test-database';

/** pg_stat_statements rows of the spec's own database (the test cluster preloads the extension). */
export const THIS_DATABASE = `dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`;

/** Forgets the statistics of the spec's own database (those of other specs' databases stay). */
export function resetStatementStats(db: Pick<TestDatabase, 'sql'>): Promise<unknown> {
  return db.sql('SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)');
}
