import { Injectable } from '@nestjs/common';
import { Client } from 'pg';
import { TaskHandler, type Task, type TaskContext } from '@app/pg-queue';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import type { Prisma } from '../../src/generated/prisma/client';
import { bootQueueApp, nextEvents, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

const TIMEOUT_MS = 1000;

/** A handler stuck in SQL that ignores its abort signal, and a quick one behind it. */
@Injectable()
class StuckHandlers {
  @TaskHandler('stuck.sql', { concurrency: 1, batchSize: 1, timeoutMs: TIMEOUT_MS, maxAttempts: 1 })
  async run(task: Task<{ stuck: boolean }>, ctx: TaskContext<Prisma.TransactionClient>) {
    if (task.payload.stuck) await ctx.tx.$executeRawUnsafe('SELECT pg_sleep(60)');
    else await ctx.tx.$executeRawUnsafe('SELECT 1');
  }
}

describe('timeoutMs bounds time spent in SQL (issue 12 item 6)', () => {
  let db: TestDatabase;
  let qa: QueueApp;

  beforeAll(async () => {
    db = await createTestDatabase();
    qa = await bootQueueApp(db.prisma(), [StuckHandlers], { databaseUrl: db.url });
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });

  it('a query stuck past the timeout is cancelled: the attempt fails and the slot runs the next task', async () => {
    const dead = nextEvents(qa.queue.events$, (e) => e.type === 'dead');
    const completed = nextEvents(qa.queue.events$, (e) => e.type === 'completed');
    const stuckId = await qa.queue.enqueue('stuck.sql', { stuck: true });
    await qa.queue.enqueue('stuck.sql', { stuck: false });
    // Before the fix the rollback waited behind the 60 s query (and the slot with it).
    const deadline = new Promise<string>((resolve) => setTimeout(resolve, 15_000, 'still stuck after 15 s').unref());
    expect(await Promise.race([dead.then(([e]) => e.taskId), deadline])).toBe(stuckId);
    expect(await Promise.race([completed.then(() => 'next task ran'), deadline])).toBe('next task ran');
    expect(await qa.queue.get(stuckId)).toMatchObject({ state: 'dead', lastError: expect.stringMatching(/timed out|TaskTimeoutError/i) });
    const sleeping = await db.sql("SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(60)%' AND state = 'active'");
    expect(sleeping).toEqual([{ n: 0 }]);
  }, 60_000);

  it('the cancel reaches a backend only while it still runs the batch\'s transaction', async () => {
    const other = new Client({ connectionString: db.url });
    await other.connect();
    try {
      await other.query('BEGIN');
      const [{ pid, xid }] = (await other.query('SELECT pg_backend_pid() AS pid, pg_current_xact_id()::text AS xid')).rows;
      const repo = qa.app.get(TaskRepository, { strict: false });
      const sleeping = other.query('SELECT pg_sleep(2)').then(() => 'finished', (err: Error) => err.message);
      await waitForActive(pid);
      // The same backend, another transaction (as when the batch ended and the connection went back to the pool).
      await repo.cancelStatement(db.prisma(1), { pid, xactId: String(BigInt(xid) + 1000n) });
      expect(await sleeping).toBe('finished');
      const again = other.query('SELECT pg_sleep(30)').then(() => 'finished', (err: Error) => err.message);
      await waitForActive(pid);
      await repo.cancelStatement(db.prisma(1), { pid, xactId: xid });
      expect(await again).toMatch(/canceling statement due to user request/);
    } finally {
      await other.end();
    }
  });

  async function waitForActive(pid: number): Promise<void> {
    for (let i = 0; i < 200; i++) {
      const [row] = await db.sql("SELECT state FROM pg_stat_activity WHERE pid = $1", [pid]);
      if (row?.state === 'active') return;
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error('the statement never became active');
  }
});
