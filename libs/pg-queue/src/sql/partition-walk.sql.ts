import { partitionBackedOff } from './backoff.sql';
import { groupFirst } from './claim.sql';
import { hasPausedPartition } from './pause.sql';

/**
 * The pieces of a partitioned claim's walk (claimPartitioned in limits.sql.ts): the next key of
 * the walk, what a walked partition has room for, and the tasks it offers.
 */

/** The first partition key of the queue's pending tasks after `after` (and up to `upTo`): one probe of task_partition_idx. */
export function keyAfter(s: string, after: string, upTo?: string): string {
  return `SELECT min(t.partition_key) AS p FROM ${s}.task t
          WHERE t.queue = $1 AND t.state = 'pending' AND t.partition_key > ${after}${upTo ? ` AND t.partition_key <= ${upTo}` : ''}`;
}

/**
 * Task `t` is a pending task of the walked partition `alias` (p, top): keyed partitions within
 * their claim-order range up to (their highest priority `top`, now), an index range bound, so that
 * their delayed tasks of their least urgent priority are never read; '' for no partition.
 * Two conditions, not one CASE: each is an index condition of its own query branch.
 */
const keyedTask = (alias: string) =>
  `t.queue = $1 AND t.state = 'pending' AND t.partition_key = ${alias}.p AND (t.priority, t.run_at) <= (${alias}.top, now())`;
const unpartitionedTask = `t.queue = $1 AND t.state = 'pending' AND t.partition_key IS NULL`;

/**
 * A walked partition `w.p`: its room under the rules (`c.cap`: its concurrency limit less its
 * running tasks, and its rate window's room), then, only when that is above 0, its highest pending
 * priority (`x.top`) and its room (`r.room`, 0 when no task is due that its group lets run, so
 * that a partition the round counts offers a task; or when it is paused: pause.sql.ts,
 * the per-partition probe only while the queue has a paused partition; or backed off:
 * backoff.sql.ts, a probe of the tiny backoff table). A partition at its limit, as many are when
 * slots free one at a time, costs the walk no probe of its tasks.
 */
export function visit(s: string): string {
  // OFFSET 0 keeps each LATERAL a subquery of its own, evaluated once per partition: flattened,
  // the room expression would be computed again for the filter on it. Tasks without a partition
  // are looked for in claim order (LIMIT 1, task_claim_idx), which a generic plan reads as one
  // queue's index range: as an EXISTS it chose a scan of the whole table.
  // For a queue whose tasks all have partitions this reads its pending tasks, once per lap.
  return `CROSS JOIN LATERAL (
    SELECT greatest(least($6 - coalesce((SELECT n FROM running WHERE running.p = w.p), 0),
                          coalesce($9::int - coalesce((SELECT n FROM rated WHERE rated.p = w.p), 0), $6)), 0) AS cap OFFSET 0
  ) c
  CROSS JOIN LATERAL (
    SELECT CASE WHEN c.cap > 0 THEN (SELECT max(m.priority) FROM ${s}.task m WHERE m.queue = $1 AND m.state = 'pending' AND m.partition_key = w.p) END AS top
    OFFSET 0
  ) x
  CROSS JOIN LATERAL (
    SELECT CASE WHEN c.cap = 0 THEN 0
                WHEN w.p <> '' AND ${hasPausedPartition(s)}
                     AND EXISTS (SELECT 1 FROM ${s}.queue_pause qp WHERE qp.queue = $1 AND qp.partition_key = w.p) THEN 0
                WHEN ${partitionBackedOff(s, 'w.p')} THEN 0
                WHEN (CASE WHEN w.p = '' THEN (SELECT 1 FROM ${s}.task t WHERE ${unpartitionedTask} AND t.run_at <= now() AND ${groupFirst(s)}
                                               ORDER BY t.priority, t.run_at, t.id LIMIT 1) IS NOT NULL
                           ELSE EXISTS (SELECT 1 FROM ${s}.task t, (SELECT w.p, x.top) pt WHERE ${keyedTask('pt')} AND t.run_at <= now() AND ${groupFirst(s)}) END)
           THEN c.cap
           ELSE 0 END AS room
    OFFSET 0
  ) r`;
}

/** The due tasks partition `w` offers, in claim order, at most its room. */
export function offer(s: string): string {
  const branch = (gate: string, where: string) => `(
    SELECT t.id, row_number() OVER (ORDER BY t.priority, t.run_at, t.id) AS rank FROM ${s}.task t
    WHERE ${gate} AND ${where} AND t.run_at <= now() AND ${groupFirst(s)}
    ORDER BY t.priority, t.run_at, t.id
    LIMIT w.room)`;
  return `${branch(`w.p <> ''`, keyedTask('w'))}
    UNION ALL
    ${branch(`w.p = ''`, unpartitionedTask)}`;
}
