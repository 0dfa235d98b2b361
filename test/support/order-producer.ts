import type { TaskQueue } from '@app/pg-queue';
import type { PrismaClient } from '../../src/generated/prisma/client';
import { pause } from './wait-for';

type Sql = <T = any>(text: string, values?: unknown[]) => Promise<T[]>;

/** An order whose business transaction (the order and its task) was acknowledged by a commit. */
export interface ProducedOrder {
  /** The task id the enqueue returned. */
  id: string;
  /** The order's `customer`, also its task's `payload.order`. */
  order: string;
  at: number;
}

/**
 * The failover specs' producer: orders written one at a time, each enqueueing its task in the same
 * business transaction (alternately into `queues`), through whatever address `prisma` uses, until
 * `count` were acknowledged or `stopped()`. A refused transaction (the database away) is not
 * retried: a commit whose answer was lost may still have committed, so the next order is a new one
 * either way, and the audits pair orders with tasks by name (see orderTaskPairs).
 */
export function produceOrders(
  prisma: PrismaClient,
  queue: TaskQueue,
  { count, prefix, queues, stopped }: { count: number; prefix: string; queues: string[]; stopped: () => boolean },
) {
  const committed: ProducedOrder[] = [];
  const state = { refused: 0 };
  const done = (async () => {
    for (let i = 0; committed.length < count && !stopped(); i++) {
      const order = `${prefix}${i}`;
      try {
        const id = await prisma.$transaction(async (tx) => {
          await tx.order.create({ data: { customer: order, amountCents: i } });
          return queue.enqueue(queues[i % queues.length], { order }, { tx });
        }, { maxWait: 5000, timeout: 10_000 });
        committed.push({ id, order, at: Date.now() });
      } catch {
        state.refused++;
        await pause(50);
      }
    }
  })();
  return { committed, done, refused: () => state.refused };
}

/**
 * Orders named `prefix…` against the tasks of `queues` carrying them (hot table and archive): both
 * counts, and those of either side without the other (a business write without its task, or a
 * task without its business write).
 */
export async function orderTaskPairs(sql: Sql, prefix: string, queues: string[]) {
  const [pairs] = await sql<{ orders: number; tasks: number; orphan_orders: number; orphan_tasks: number }>(
    `WITH o AS (SELECT customer FROM orders WHERE customer LIKE $2 || '%'),
          t AS (SELECT payload->>'order' AS customer FROM pgqueue.task_archive WHERE queue = ANY($1) AND payload ? 'order'
                UNION ALL SELECT payload->>'order' FROM pgqueue.task WHERE queue = ANY($1) AND payload ? 'order')
     SELECT (SELECT count(*)::int FROM o) AS orders, (SELECT count(*)::int FROM t) AS tasks,
            (SELECT count(*)::int FROM o WHERE customer NOT IN (SELECT customer FROM t)) AS orphan_orders,
            (SELECT count(*)::int FROM t WHERE customer NOT IN (SELECT customer FROM o)) AS orphan_tasks`,
    [queues, prefix],
  );
  return pairs;
}
