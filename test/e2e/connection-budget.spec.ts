/**
 * The connection budget checked when workers start (connection.budget.ts): a Prisma pool the
 * server cannot accept is refused with the numbers to change; one the queue's work will wait for
 * is a warning. The pool's size is read from the PrismaClient itself.
 */
import { Injectable, Logger } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import { Pool } from 'pg';
import { PgQueueError, TaskHandler, type Task } from '@app/pg-queue';
import { prismaPoolMax } from '../../libs/pg-queue/src/prisma-adapter';
import { PrismaClient } from '../../src/generated/prisma/client';
import { bootQueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

@Injectable()
class BudgetHandlers {
  @TaskHandler('budget.tx', { concurrency: 8 })
  async tx(_task: Task) {}

  @TaskHandler('budget.lease', { mode: 'lease', concurrency: 50 })
  async lease(_task: Task) {}
}

describe('connection budget at startup', () => {
  let db: TestDatabase;
  const clients: PrismaClient[] = [];
  const client = (max?: number) => {
    const c = new PrismaClient({ adapter: new PrismaPg({ connectionString: db.url, ...(max === undefined ? {} : { max }) }) });
    clients.push(c);
    return c;
  };
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    for (const c of clients) await c.$disconnect();
    await db.drop();
  });

  it("reads the pool's max from the PrismaClient: given, pg's default, or an external pool's", async () => {
    const external = new Pool({ connectionString: db.url, max: 3 });
    const c = new PrismaClient({ adapter: new PrismaPg(external) });
    expect([prismaPoolMax(client(7)), prismaPoolMax(client()), prismaPoolMax(c), prismaPoolMax({})]).toEqual([7, 10, 3, null]);
    await external.end();
  });

  it("refuses a pool larger than the server accepts, naming the numbers", async () => {
    const [{ max }] = await db.sql<{ max: number }>("SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int AS max");
    const err = await bootQueueApp(client(max + 10), [BudgetHandlers], { autoStart: true, databaseUrl: db.url }).then(
      (qa) => qa.close().then(() => null),
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(PgQueueError);
    expect((err as Error).message).toBe(
      `pg-queue: connection budget: this process alone needs ${max + 11} connections (a Prisma pool of ${max + 10} and LISTEN) but the server accepts ${max} (max_connections minus superuser_reserved_connections): lower the pool's max or raise max_connections`,
    );
  });

  it('warns when the work will wait for the pool, and starts', async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn');
    try {
      const qa = await bootQueueApp(client(4), [BudgetHandlers], { autoStart: true });
      await qa.close();
      const budget = warn.mock.calls.map(([m]) => String(m)).filter((m) => m.startsWith('connection budget'));
      expect(budget).toEqual([
        "connection budget: the queue's work can use 12 pool connections at once (8 transactional slots, 2 claims, 1 lease-mode completions, 1 for maintenance) but the Prisma pool's max is 4: tasks will wait for connections. Raise the pool's max to 12 or lower the transactional queues' concurrency",
      ]);
    } finally {
      warn.mockRestore();
    }
  });
});
