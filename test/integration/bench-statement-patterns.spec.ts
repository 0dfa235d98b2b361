/**
 * The bench's pattern for pg-queue's claim statement (bench/src/targets/pg-queue-statements.ts)
 * finds, in pg_stat_statements as the bench reads it (ILIKE on the normalised text), the claims
 * the library ran and nothing else: when it did not, the bench printed n/a for the claim's server
 * time (the pattern named gen_random_uuid(), which the claim no longer calls).
 */
import { CLAIM_STATEMENT_PATTERN } from '../../bench/src/targets/pg-queue-statements';
import { installSchema } from '../../libs/pg-queue/src/sql/schema.installer';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import { taskRow } from '../support/task-rows';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { resetStatementStats, THIS_DATABASE } from '../support/statement-stats';

describe("the bench's statement patterns", () => {
  let db: TestDatabase;
  const repo = new TaskRepository('pgqueue', 'archive');
  beforeAll(async () => {
    db = await createTestDatabase();
    await installSchema(db.prisma(), 'pgqueue');
    await db.sql('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  });
  afterAll(() => db.drop());

  it("matches the plain claims pg-queue ran, and none of the other statements of a drain", async () => {
    await resetStatementStats(db);
    await repo.insert(db.prisma(), [taskRow('bp.q'), taskRow('bp.q'), taskRow('bp.q')]);
    const first = await repo.claim(db.prisma(), 'bp.q', 2, 'bench-pattern', 60_000, 5);
    const second = await repo.claim(db.prisma(), 'bp.q', 2, 'bench-pattern', 60_000, 5);
    expect(first.rows.length + second.rows.length).toBe(3);
    const rows = await db.sql<{ calls: number; matches: boolean }>(
      `SELECT calls::int, query ILIKE $1 AS matches FROM pg_stat_statements
       WHERE ${THIS_DATABASE} AND query NOT ILIKE '%pg_stat_statements%'`,
      [CLAIM_STATEMENT_PATTERN],
    );
    expect(rows.filter((r) => r.matches)).toEqual([{ calls: 2, matches: true }]);
    expect(rows.filter((r) => !r.matches).length).toBeGreaterThan(0); // the insert, at least
  });
});
