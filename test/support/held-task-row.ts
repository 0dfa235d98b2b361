import type { TaskQueue } from '@app/pg-queue';
import type { PrismaClient } from '../../src/generated/prisma/client';
import { deferred } from './queue-app';

/**
 * A business transaction that enqueues a task (of `dependantQueue`, which should have no handler)
 * depending on running task `taskId` and stays open `ms`: the enqueue locks the task's row
 * (FOR NO KEY UPDATE, see dependencies.sql.ts) until the commit. Resolves once the row is held,
 * with the transaction's end.
 */
export async function holdTaskRow(prisma: PrismaClient, queue: TaskQueue, taskId: string, ms: number, dependantQueue = 'held.after'): Promise<{ committed: Promise<void> }> {
  const locked = deferred();
  const committed = prisma.$transaction(
    async (tx) => {
      await queue.enqueue(dependantQueue, {}, { tx, dependsOn: [taskId] });
      locked.resolve();
      await new Promise((r) => setTimeout(r, ms));
    },
    { maxWait: 5000, timeout: ms + 10_000 },
  );
  await Promise.race([locked.promise, committed]);
  return { committed };
}

/**
 * Samples, every 100 ms for `forMs`, how long the statements of the queue (marked `/* pg-queue *\/`)
 * have been waiting for a lock; resolves with the longest wait seen (ms; 0: none waited).
 */
export async function longestLockWait(sql: (text: string) => Promise<{ age: number | null }[]>, forMs: number): Promise<number> {
  const until = Date.now() + forMs;
  let longest = 0;
  while (Date.now() < until) {
    const [row] = await sql(
      `SELECT max(extract(epoch FROM clock_timestamp() - query_start) * 1000)::float8 AS age FROM pg_stat_activity
       WHERE wait_event_type = 'Lock' AND query LIKE '%pg-queue%' AND pid <> pg_backend_pid()`,
    );
    longest = Math.max(longest, row.age ?? 0);
    await new Promise((r) => setTimeout(r, 100));
  }
  return longest;
}
