/**
 * The transactions whose lock decisions need READ COMMITTED (a limited claim, a bounded
 * transaction: read-committed.ts) ask Prisma for the level only when the database does not run it
 * by default: asking costs a round trip (`SET TRANSACTION ISOLATION LEVEL` after BEGIN) in every
 * limited claim. On a database that defaults to REPEATABLE READ they still run READ COMMITTED.
 */
import { inBoundedTransaction, ONE_ROW_BOUNDS } from '../../libs/pg-queue/src/sql/bounded-transaction';
import { LimitsRepository } from '../../libs/pg-queue/src/sql/limits.repository';
import { installSchema } from '../../libs/pg-queue/src/sql/schema.installer';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

const GLOBAL_3 = { globalConcurrency: 3, partitionConcurrency: null, rateLimit: null };

describe('transactions that need READ COMMITTED', () => {
  let db: TestDatabase;

  beforeAll(async () => {
    db = await createTestDatabase();
    await installSchema(db.prisma(), 'pgqueue');
    await db.sql('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  });
  afterAll(async () => {
    await db.drop();
  });

  /** How often this database's sessions set a transaction's isolation level (pg_stat_statements is per server). */
  async function levelsSet(): Promise<number> {
    const [{ n }] = await db.sql<{ n: number }>(
      `SELECT coalesce(sum(s.calls), 0)::int AS n FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
       WHERE d.datname = $1 AND s.query ILIKE 'SET TRANSACTION ISOLATION LEVEL%'`,
      [db.name],
    );
    return n;
  }

  async function enqueue(queue: string, n: number): Promise<void> {
    await db.sql(`INSERT INTO pgqueue.task (queue, payload) SELECT $1, '{}' FROM generate_series(1, $2::int)`, [queue, n]);
  }

  it('under the default READ COMMITTED: no level is set, one round trip less per transaction', async () => {
    const prisma = db.prisma(2);
    try {
      await enqueue('rc.default', 5);
      const before = await levelsSet();
      const claim = await new LimitsRepository('pgqueue').claim(prisma, 'rc.default', 5, 'w', 60_000, 5, GLOBAL_3);
      const level = await inBoundedTransaction(prisma, 'a test', ONE_ROW_BOUNDS, 0, async (tx) => tx.$queryRawUnsafe<{ l: string }[]>("SELECT current_setting('transaction_isolation') AS l"));
      expect({ claimed: claim.rows.length, level: level[0].l, levelsSet: (await levelsSet()) - before }).toEqual({ claimed: 3, level: 'read committed', levelsSet: 0 });
    } finally {
      await prisma.$disconnect();
    }
  });

  it('under a default of REPEATABLE READ: the transactions still run READ COMMITTED (a limited claim counts the claims before it)', async () => {
    await db.sql(`ALTER DATABASE ${db.name} SET default_transaction_isolation = 'repeatable read'`);
    const prisma = db.prisma(2); // new sessions: the new default
    try {
      const [{ d }] = await prisma.$queryRawUnsafe<{ d: string }[]>("SELECT current_setting('transaction_isolation') AS d");
      expect(d).toBe('repeatable read');
      await enqueue('rc.rr', 5);
      const repo = new LimitsRepository('pgqueue');
      const first = await repo.claim(prisma, 'rc.rr', 5, 'w', 60_000, 5, GLOBAL_3);
      const second = await repo.claim(prisma, 'rc.rr', 5, 'w', 60_000, 5, GLOBAL_3);
      const level = await inBoundedTransaction(prisma, 'a test', ONE_ROW_BOUNDS, 0, async (tx) => tx.$queryRawUnsafe<{ l: string }[]>("SELECT current_setting('transaction_isolation') AS l"));
      expect({ first: first.rows.length, second: second.rows.length, level: level[0].l }).toEqual({ first: 3, second: 0, level: 'read committed' });
    } finally {
      await prisma.$disconnect();
      await db.sql(`ALTER DATABASE ${db.name} RESET default_transaction_isolation`);
    }
  });
});
