import { Client } from 'pg';
import { printSchemaSql } from '../../libs/pg-queue/src/sql/schema.sql';
import { installSchema } from '../../libs/pg-queue/src/sql/schema.installer';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

describe('schema installation', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db.drop());

  it('installs into a configurable schema, and a second run changes nothing', async () => {
    expect(await installSchema(db.prisma(), 'jobs_a')).toEqual([1, 2, 3, 4]);
    expect(await installSchema(db.prisma(), 'jobs_a')).toEqual([]);
    const tables = await db.sql("SELECT table_name FROM information_schema.tables WHERE table_schema = 'jobs_a' ORDER BY 1");
    expect(tables.map((t) => t.table_name)).toEqual(['schedule', 'schema_version', 'task', 'task_archive', 'task_cancel']);
  });

  it('the claim index is partial on pending rows', async () => {
    await installSchema(db.prisma(), 'jobs_a');
    const [idx] = await db.sql("SELECT indexdef FROM pg_indexes WHERE schemaname = 'jobs_a' AND indexname = 'task_claim_idx'");
    expect(idx.indexdef).toMatch(/\(queue, priority, run_at, id\) WHERE \(state = 'pending'::text\)/);
  });

  it('printed SQL (for prisma/migrations) creates the same schema and the installer then finds it current', async () => {
    const client = new Client({ connectionString: db.url });
    await client.connect();
    try {
      await client.query(printSchemaSql('jobs_printed'));
    } finally {
      await client.end();
    }
    expect(await installSchema(db.prisma(), 'jobs_printed')).toEqual([]);
    const columns = (schema: string) =>
      db.sql("SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = $1 ORDER BY 1, 2", [schema]);
    await installSchema(db.prisma(), 'jobs_a');
    expect(await columns('jobs_printed')).toEqual(await columns('jobs_a'));
  });
});
