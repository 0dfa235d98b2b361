import { installSchema } from '../../libs/pg-queue/src/sql/schema.installer';
import { createTestDatabase, type TestDatabase } from './test-database';

/**
 * A test database with the queue's tables installed in schema `pgqueue`, for the statement specs
 * of one describe block: created before its tests, dropped after them. Read `.db` inside a test.
 */
export function schemaDatabase(): { readonly db: TestDatabase } {
  const holder = {} as { db: TestDatabase };
  beforeAll(async () => {
    holder.db = await createTestDatabase();
    await installSchema(holder.db.prisma(), 'pgqueue');
  });
  afterAll(async () => {
    await holder.db?.drop();
  });
  return holder;
}
