/**
 * The flow-controlled claims (limits.sql.ts) against a real backlog: planned from row estimates,
 * their cost passes Postgres' jit_above_cost on a queue of some thousands of tasks, and compiling
 * took ~80 ms of a ~4 ms claim (bench scenario 9: 286 partitioned claims' tasks per second).
 */
import { LimitsRepository } from '../../libs/pg-queue/src/sql/limits.repository';
import { installSchema } from '../../libs/pg-queue/src/sql/schema.installer';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

describe('limited claims', () => {
  let db: TestDatabase;

  beforeAll(async () => {
    db = await createTestDatabase();
    await installSchema(db.prisma(), 'pgqueue');
  });
  afterAll(async () => {
    await db.drop();
  });

  it('are never JIT-compiled', async () => {
    await db.sql('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    // A session that compiles everything it can, as a large backlog's estimates make a claim do.
    await db.sql(`ALTER DATABASE ${db.name} SET jit_above_cost = 0`);
    const prisma = db.prisma(2);
    try {
      await db.sql(`INSERT INTO pgqueue.task (queue, payload, partition_key) SELECT 'lc.q', '{}', 'p' || (g % 3) FROM generate_series(1, 300) g`);
      await db.sql('SELECT pg_stat_statements_reset()');
      const repo = new LimitsRepository('pgqueue');
      const claim = await repo.claim(prisma, 'lc.q', 5, 'w', 60_000, 5, { globalConcurrency: 10, partitionConcurrency: 2, rateLimit: { max: 100, perMs: 1000 } });
      await prisma.$queryRawUnsafe("SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = 'lc.q'");
      const rows = await db.sql<{ query: string; jit_functions: number }>(
        "SELECT query, jit_functions::int FROM pg_stat_statements WHERE query LIKE '%walk AS (%' OR query LIKE '%count(*)::int AS n FROM pgqueue.task%' OR query LIKE '%rate_starts%'",
      );
      const control = rows.filter((r) => r.query.includes('count(*)::int AS n FROM pgqueue.task WHERE queue'));
      const limited = rows.filter((r) => !control.includes(r));
      expect({ claimed: claim.rows.length, controlCompiles: control.map((r) => r.jit_functions > 0) }).toEqual({ claimed: 5, controlCompiles: [true] });
      expect(limited.length).toBeGreaterThanOrEqual(2);
      expect(limited.map((r) => ({ query: r.query.slice(0, 60), jit: r.jit_functions }))).toEqual(limited.map((r) => ({ query: r.query.slice(0, 60), jit: 0 })));
    } finally {
      await prisma.$disconnect();
      await db.sql(`ALTER DATABASE ${db.name} RESET jit_above_cost`);
    }
  });
});
