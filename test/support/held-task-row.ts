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
