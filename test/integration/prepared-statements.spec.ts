import { PrismaPg } from '@prisma/adapter-pg';
import { queueStatementName } from '@app/pg-queue';
import { drainQueue } from '@app/pg-queue/testing';
import { Injectable } from '@nestjs/common';
import { TaskHandler } from '@app/pg-queue';
import { PrismaClient } from '../../src/generated/prisma/client';
import { bootQueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

@Injectable()
class Noop {
  @TaskHandler('prep.q')
  async run() {}
}

describe('prepared statements (statementNameGenerator: queueStatementName)', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db.drop());

  it('names only the queue statements, stably', () => {
    const sql = '/* pg-queue */SELECT 1';
    expect(queueStatementName({ sql })).toMatch(/^pgq_[0-9a-f]{20}$/);
    expect(queueStatementName({ sql })).toBe(queueStatementName({ sql }));
    expect(queueStatementName({ sql: '/* pg-queue */SELECT 2' })).not.toBe(queueStatementName({ sql }));
    expect(queueStatementName({ sql: 'SELECT 1' })).toBe('');
  });

  it('the hot path runs as named statements on a Prisma client configured with it', async () => {
    // one connection, so this session's pg_prepared_statements shows what the queue prepared
    const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: db.url, max: 1 }, { statementNameGenerator: queueStatementName }) });
    const qa = await bootQueueApp(prisma, [Noop], { autoStart: false });
    try {
      await qa.queue.enqueueMany(Array.from({ length: 30 }, () => ({ queue: 'prep.q', payload: {} })));
      expect(await drainQueue(qa.app, 'prep.q')).toBe(30);
      const rows = await prisma.$queryRawUnsafe<{ name: string; statement: string }[]>('SELECT name, statement FROM pg_prepared_statements');
      const queueStatements = rows.filter((r) => r.name.startsWith('pgq_'));
      expect(queueStatements.length).toBeGreaterThanOrEqual(4); // insert, claim, lock leases, complete
      expect(queueStatements.every((r) => r.statement.startsWith('/* pg-queue */'))).toBe(true);
      expect(rows.some((r) => r.statement.includes('pg_prepared_statements'))).toBe(false);
    } finally {
      await qa.close();
      await prisma.$disconnect();
    }
  });
});
