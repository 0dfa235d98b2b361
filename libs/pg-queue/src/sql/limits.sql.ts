import { claimFrom, groupFirst } from './claim.sql';
import { quoteIdent } from './identifiers';
import { marked } from './fragments.sql';

/** First key of the advisory lock that serialises a limited queue's claims; the second is hashtext(schema.queue). */
const LIMIT_LOCK_NAMESPACE = 0x70_67_6c; // "pgl"

/**
 * Flow control: global concurrency, per-partition concurrency with partitions taking turns, and
 * a rate limit, enforced by Postgres inside the claim so they hold across every instance and
 * survive crashes (a crashed holder's task stays `running`, and so keeps its slot, until the
 * rescuer returns its lease). Queues without these rules never run these statements.
 *
 * Lock decision: a limited queue's claim is a transaction whose first statement takes a
 * transaction-scoped advisory lock on the queue. Every later statement of that transaction takes
 * a fresh snapshot (READ COMMITTED), so it counts every claim committed before it; two claimers
 * can never both count the same free slot. Counting inside one statement would not do: a
 * statement's snapshot predates any lock it takes. A completion needs no lock: a task that ends
 * while a claim counts can only make that claim take less, never more. Transaction-scoped, so it
 * works through PgBouncer in transaction pooling, and is released by the commit.
 *
 * The rules read only the rows they need: running tasks of the queue (task_running_idx; running
 * rows are few), the queue's `queue_state` row (the rate window's start times, the round's
 * cursor), and, for partitioned queues, each partition's first due tasks (task_partition_idx).
 */
export function limitStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    /**
     * Also turns JIT off for the claim's transaction: planned from row estimates, the partitioned
     * claim's cost passes jit_above_cost on a backlog of some thousands, and compiling it took
     * ~80 ms of a ~4 ms claim (see JIT_OFF). Parameters: $1 the lock's name: `${schema}.${queue}`.
     */
    lock: `SELECT set_config('jit', 'off', true), pg_advisory_xact_lock(${LIMIT_LOCK_NAMESPACE}, hashtext($1))`,

    /**
     * What the queue-wide rules leave room for: its running tasks, and the rate window's starts
     * (those older than the window no longer count) with when the oldest of them leaves it; also
     * the round's cursor and the database's clock. The window is read and written by
     * clock_timestamp(), not now(): the claim's transaction may have waited for the queue's lock,
     * and its start would date these claims too early and let the next window open too soon.
     * With a rate limit per partition, also when the first full partition's window frees a slot.
     * Parameters: $1 queue, $2 rate window in ms (0: no queue-wide rate limit), $3 per-partition
     * rate limit (NULL: none), $4 its window in ms.
     */
    room: `
SELECT (SELECT count(*) FROM ${s}.task WHERE queue = $1 AND state = 'running')::int AS running,
       count(w.st)::int AS window_starts,
       (extract(epoch FROM min(w.st) + $2 * interval '1 millisecond' - clock_timestamp()) * 1000)::float8 AS window_frees_in_ms,
       (SELECT partition_cursor FROM ${s}.queue_state WHERE queue = $1) AS cursor,
       (SELECT (extract(epoch FROM min(f.frees_at) - clock_timestamp()) * 1000)::float8
        FROM (SELECT min(st) + $4 * interval '1 millisecond' AS frees_at
              FROM ${s}.partition_rate r CROSS JOIN LATERAL unnest(r.starts) AS st
              WHERE r.queue = $1 AND $3::int IS NOT NULL AND st > clock_timestamp() - $4 * interval '1 millisecond'
              GROUP BY r.partition_key HAVING count(*) >= $3::int) f) AS partition_frees_in_ms,
       (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS db_now_ms
FROM (SELECT st FROM ${s}.queue_state q, unnest(q.rate_starts) AS st
      WHERE q.queue = $1 AND $2 > 0 AND st > clock_timestamp() - $2 * interval '1 millisecond') w`,

    /**
     * The partitioned claim: partitions with pending work take turns. One round visits up to $8
     * partitions in key order, starting after the cursor ($7, the last partition served; NULL:
     * from the first) and wrapping around, then tasks without a partition (a partition of their
     * own, last). Each partition offers its first due tasks, as many as its room ($6 minus its
     * running tasks); the claim takes them by rank, then by place in the round: the first task of
     * every partition before the second of any. So a partition with 10 000 tasks waiting gets one
     * turn per round, like one with 10.
     * The partitions come from a skip scan of task_partition_idx (one probe per partition, however
     * many tasks each has). No FOR UPDATE: the queue's lock keeps other claimers out, and the
     * UPDATE re-checks `state = 'pending'` on rows an operator changed meanwhile.
     * Parameters as claimFrom, and $6 per-partition limit, $7 cursor, $8 partitions per round,
     * $9 per-partition rate limit (NULL: none) and $10 its window in ms (partition_rate).
     */
    claimPartitioned: claimFrom(
      s,
      `
  WITH RECURSIVE after_cursor AS (
    SELECT (SELECT t.partition_key FROM ${s}.task t
            WHERE t.queue = $1 AND t.state = 'pending' AND t.partition_key > coalesce($7, '')
            ORDER BY t.partition_key LIMIT 1) AS p, 1 AS pos
    UNION ALL
    SELECT (SELECT t.partition_key FROM ${s}.task t
            WHERE t.queue = $1 AND t.state = 'pending' AND t.partition_key > a.p
            ORDER BY t.partition_key LIMIT 1), a.pos + 1
    FROM after_cursor a WHERE a.p IS NOT NULL AND a.pos < $8
  ), before_cursor AS (
    SELECT (SELECT t.partition_key FROM ${s}.task t
            WHERE t.queue = $1 AND t.state = 'pending' AND t.partition_key > '' AND t.partition_key <= $7
            ORDER BY t.partition_key LIMIT 1) AS p, 1 AS pos
    WHERE $7 IS NOT NULL
    UNION ALL
    SELECT (SELECT t.partition_key FROM ${s}.task t
            WHERE t.queue = $1 AND t.state = 'pending' AND t.partition_key > b.p AND t.partition_key <= $7
            ORDER BY t.partition_key LIMIT 1), b.pos + 1
    FROM before_cursor b WHERE b.p IS NOT NULL AND b.pos < $8
  ), round AS (
    SELECT p, pos FROM after_cursor WHERE p IS NOT NULL
    UNION ALL SELECT p, pos + $8 FROM before_cursor WHERE p IS NOT NULL
  ), running AS (
    SELECT partition_key AS p, count(*)::int AS n FROM ${s}.task WHERE queue = $1 AND state = 'running' GROUP BY 1
  ), rated AS (
    -- Per-partition rate windows ('' stands for no partition): starts still inside the window.
    SELECT r.partition_key AS p, count(*)::int AS n
    FROM ${s}.partition_rate r CROSS JOIN LATERAL unnest(r.starts) AS st
    WHERE r.queue = $1 AND $9::int IS NOT NULL AND st > clock_timestamp() - $10 * interval '1 millisecond'
    GROUP BY 1
  ), offered AS (
    SELECT c.id, c.rank, r.pos
    FROM round r
    CROSS JOIN LATERAL (
      SELECT t.id, row_number() OVER (ORDER BY t.priority, t.run_at, t.id) AS rank FROM ${s}.task t
      WHERE t.queue = $1 AND t.partition_key = r.p AND t.state = 'pending' AND t.run_at <= now() AND ${groupFirst(s)}
      ORDER BY t.priority, t.run_at, t.id
      LIMIT greatest(least($6 - coalesce((SELECT n FROM running WHERE running.p = r.p), 0),
                           coalesce($9::int - coalesce((SELECT n FROM rated WHERE rated.p = r.p), 0), $6)), 0)
    ) c
    UNION ALL
    SELECT c.id, c.rank, 3 * $8
    FROM (
      SELECT t.id, row_number() OVER (ORDER BY t.priority, t.run_at, t.id) AS rank FROM ${s}.task t
      WHERE t.queue = $1 AND t.partition_key IS NULL AND t.state = 'pending' AND t.run_at <= now() AND ${groupFirst(s)}
      ORDER BY t.priority, t.run_at, t.id
      LIMIT greatest(least($6 - coalesce((SELECT n FROM running WHERE running.p IS NULL), 0),
                           coalesce($9::int - coalesce((SELECT n FROM rated WHERE rated.p = ''), 0), $6)), 0)
    ) c
  )
  SELECT id FROM offered ORDER BY rank, pos LIMIT $2`,
      { partitioned: true },
    ),

    /**
     * A task of a limited queue ended: wake its workers everywhere (a freed slot is announced by
     * nothing else). Parameters: $1 channel, $2 queue.
     */
    announce: `SELECT pg_notify($1, $2)`,

    /**
     * After a claim of a queue limited per partition: each partition's window keeps its starts still
     * inside it plus these. Parameters: $1 queue, $2 window ms, $3 JSON [{ p, n }] (p '' for no
     * partition; JSON because a key may hold any character).
     */
    recordPartitions: `
INSERT INTO ${s}.partition_rate AS r (queue, partition_key, window_ms, starts)
SELECT $1, x.p, $2, array_fill(clock_timestamp(), ARRAY[x.n]) FROM json_to_recordset($3::json) AS x(p text, n int)
ON CONFLICT (queue, partition_key) DO UPDATE
SET window_ms = EXCLUDED.window_ms,
    starts = ARRAY(SELECT st FROM unnest(r.starts) AS st WHERE st > clock_timestamp() - $2 * interval '1 millisecond' ORDER BY st)
             || EXCLUDED.starts`,

    /**
     * After a limited claim that took `$4` tasks: the rate window keeps the starts still inside it
     * plus these, the round's cursor moves to the last partition served.
     * Parameters: $1 queue, $2 rate window ms (0: none), $3 cursor, $4 tasks just started.
     */
    record: `
INSERT INTO ${s}.queue_state AS q (queue, partition_cursor, rate_starts)
VALUES ($1, $3, CASE WHEN $2 > 0 THEN array_fill(clock_timestamp(), ARRAY[$4::int]) ELSE '{}' END)
ON CONFLICT (queue) DO UPDATE
SET partition_cursor = EXCLUDED.partition_cursor,
    rate_starts = CASE WHEN $2 > 0 THEN
      ARRAY(SELECT st FROM unnest(q.rate_starts) AS st WHERE st > clock_timestamp() - $2 * interval '1 millisecond' ORDER BY st)
        || array_fill(clock_timestamp(), ARRAY[$4::int])
      ELSE '{}' END`,
  });
}
