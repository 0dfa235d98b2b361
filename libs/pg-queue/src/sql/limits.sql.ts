import { claimFrom } from './claim.sql';
import { quoteIdent } from './identifiers';
import { marked } from './fragments.sql';
import { queueNotPaused } from './pause.sql';
import { keyAfter, offer, visit } from './partition-walk.sql';
import { windowAdd, windowCount, windowFreesInMs } from './rate-window.sql';
import { nextTurns, resumedThenWalk, TAKEN_OFFERS, turnOf, weighed } from './weights.sql';

/** The notification payload's prefix that announces freed room in a queue (`!room <queue>`; see WakeupListener). */
export const ROOM_NOTICE = '!room ';

/** First key of the advisory lock that serialises a limited queue's claims; the second is hashtext(schema.queue). */
export const LIMIT_LOCK_NAMESPACE = 0x70_67_6c; // "pgl"

/**
 * Flow control: global concurrency, per-partition concurrency with partitions taking turns, and
 * a rate limit, enforced by Postgres inside the claim so they hold across every instance and
 * survive crashes (a crashed holder's task stays `running`, and so keeps its slot, until the
 * rescuer returns its lease). Queues without these rules never run these statements.
 *
 * Lock decision: a limited queue's claim is one call of claim_limited (limited-claim.function.ts),
 * whose first step takes a transaction-scoped advisory lock on the queue. Every later statement
 * of that function takes a fresh snapshot (a VOLATILE plpgsql function's statements do, under
 * READ COMMITTED), so it counts every claim committed before the lock was granted; two claimers
 * can never both count the same free slot. Counting in the statement that takes the lock would
 * not do: a statement's snapshot predates any lock it takes. A completion needs no lock: a task that ends
 * while a claim counts can only make that claim take less, never more. Transaction-scoped, so it
 * works through PgBouncer in transaction pooling, and is released by the commit.
 *
 * The rules read only the rows they need: running tasks of the queue (task_running_idx; running
 * rows are few), the queue's `queue_state` row (its rate window, the round's cursor), each
 * partition's `rate_window` row with a per-partition rate limit (a rate window is a few numbers
 * whatever its `max`: rate-window.sql.ts), and, for partitioned queues, each partition's first due
 * tasks (task_partition_idx).
 */
export function limitStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    /**
     * A limited claim, whole: claim_limited (limited-claim.function.ts) takes the queue's lock and
     * runs the statements below under it, in one round trip. Its bounds, for its transaction only:
     * - lock_timeout (rules.lockWaitMs): how long this claimer waits for the lock. The holder runs
     *   one statement that needs nothing from its client, so a wait past this means something is
     *   wrong; the claim fails and is retried.
     * - idle_in_transaction_session_timeout (rules.idleMs): only under a database whose default
     *   level is not READ COMMITTED, where the call runs in a transaction of its own
     *   (read-committed.ts) and the lock lasts to its commit: a holder whose process or network
     *   stalls before the commit has its session ended by the server, which releases the lock.
     * - jit off: planned from row estimates, the partitioned claim's cost passes jit_above_cost on
     *   a backlog of some thousands, and compiling it took ~80 ms of a ~4 ms claim (see JIT_OFF).
     * - plan_cache_mode force_generic_plan, for the function's statements but one: with the batch
     *   size known, a custom plan's estimate is always below the generic plan's, so the claim was
     *   planned anew at every call (1.5 ms, more than its run in bench scenario 9); its generic plan
     *   is the same plan (it still walks task_claim_idx at 500 000 pending tasks, and for a small
     *   queue beside a large one). The partitioned claim too, since its check for due tasks without
     *   a partition reads them in task_claim_idx's order (LIMIT 1): as an EXISTS its generic plan
     *   scanned the whole table beside a queue of 300 000 tasks (94 ms against 11), and its custom
     *   plans cost 5-6 ms of planning a call. The aging claim keeps custom plans (its generic one
     *   ran in 5.6 ms against 2.4).
     * Parameters: $1 queue, $2 the most tasks wanted, $3 worker id, $4 lease ms, $5 the handler's
     * maxAttempts, $6 the claim's id (claim.sql.ts), $7 the rules (JSON, see claim_limited).
     */
    claim: `SELECT claimed, next_due_in_ms, db_now_ms, paused, isolation, limit_full
FROM ${s}.claim_limited($1::text, $2::int, $3::text, $4::bigint, $5::int, $6::text, $7::jsonb)`,

    /**
     * What the queue-wide rules leave room for: its running tasks but those whose handler ended
     * at the caller ($6: their rows say running until their endings are written, a round trip
     * later; counted, a lease worker under a full limit could claim only after that write, which
     * made a claim and a completion one after the other per cycle), and the claims inside the rate
     * window with when its oldest step leaves it; also the round's cursor and the database's clock.
     * The window is read and written by clock_timestamp(), not now(): the claim's transaction may
     * have waited for the queue's lock, and its start would date these claims too early and let
     * the next window open too soon. With a rate limit per partition, also when the first full
     * partition's window frees a slot. And for freed-room announcements (see `record`): whether a
     * claim that a concurrency rule cut short is waiting, and whether any task is due (an index
     * probe of task_due_idx). And whether the queue is paused as a whole (pause.sql.ts): the claim
     * then stops here. Read in the claim's transaction, which holds queue_pause's ACCESS SHARE lock
     * until it ends: a pause waits for it, so what this says holds for the claim that follows.
     * And how long the queue, or its named limiter ($5), stays backed off (backoff.sql.ts; NULL:
     * not backed off): the claim then stops here too.
     * Parameters: $1 queue, $2 rate window in ms (0: no queue-wide rate limit), $3 per-partition
     * rate limit (NULL: none), $4 its window in ms, $5 the queue's limiter (NULL: none), $6 the
     * lease tokens of the caller's ended tasks (uuid[]; empty: none).
     */
    room: `
WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now)
SELECT (SELECT count(*) FROM ${s}.task WHERE queue = $1 AND state = 'running' AND lease_token <> ALL ($6::uuid[]))::int AS running,
       ${windowCount('q.rate_at', 'q.rate_n', '$2', 'c.now')} AS window_count,
       ${windowFreesInMs('q.rate_at', 'q.rate_n', '$2', 'c.now')} AS window_frees_in_ms,
       q.partition_cursor AS cursor, coalesce(q.partition_turns, 0) AS turns,
       (SELECT min(${windowFreesInMs('r.rate_at', 'r.rate_n', '$4', 'c.now')})
        FROM ${s}.rate_window r
        WHERE r.queue = $1 AND $3::int IS NOT NULL AND ${windowCount('r.rate_at', 'r.rate_n', '$4', 'c.now')} >= $3::int) AS partition_frees_in_ms,
       (extract(epoch FROM c.now) * 1000)::float8 AS db_now_ms,
       coalesce(q.room_wanted, false) AS room_wanted,
       coalesce((SELECT min(d.run_at) FROM ${s}.task d WHERE d.queue = $1 AND d.state = 'pending') <= now(), false) AS due,
       NOT ${queueNotPaused(s)} AS paused,
       (SELECT (extract(epoch FROM max(b.until) - c.now) * 1000)::float8 FROM ${s}.backoff b
        WHERE ((b.name = $1 AND b.scope = 'queue') OR (b.name = $5::text AND b.scope = 'limiter')) AND b.until > c.now) AS backed_off_ms
FROM c LEFT JOIN ${s}.queue_state q ON q.queue = $1`,

    /**
     * The partitioned claim: partitions with claimable work take turns.
     *
     * The round (CTE `walk`) visits partitions in key order (the database's collation), starting
     * after the cursor ($7, the partition where the last round stopped; NULL: from the start) and
     * wrapping around once. '' stands for the tasks without a partition: a partition of their own,
     * ahead of every key (a partition key is never ''). Each partition visited gets its `room`:
     * what its concurrency ($6 minus its running tasks) and its rate window ($9 per $10 ms) leave,
     * 0 when none of its due tasks may start (groupFirst; see visit in partition-walk.sql.ts). The
     * walk ends once $8 partitions with room were found, after $11 partitions, or when it is back
     * at the cursor: partitions with nothing to offer (delayed tasks only, held back by their group,
     * full, out of rate) are passed over without using up the round.
     *
     * Each partition with room offers its first due tasks, as many as its room; the claim takes
     * them by rank, then by place in the round: the first task of every partition before the second
     * of any. So a partition with 10 000 tasks waiting gets one turn per round, like one with 10.
     * The claim returns where the next round starts (`next_cursor`): after the last partition it
     * took a task from (by rank, then place) when it filled its batch, so the partitions after it
     * in the round have their turn first in the next claim, else (every partition with room gave
     * all it could) after the last partition walked, so the next claim never walks again what this
     * one passed over.
     * For freed-room announcements it also says whether a partition is at its limit
     * (`partition_full`) and whether the round offered more than the claim took (`room_left`).
     *
     * Costs: the keys come from a skip scan of task_partition_idx (one probe per partition, however
     * many tasks each has). A partition's due check and its offer scan its tasks in claim order up
     * to (its highest priority, now), an index range: with one priority they read only due tasks;
     * with several, also the delayed tasks of its more urgent priorities. No index holds only the
     * tasks without a partition (it would hold every plain queue's too): checking them is a scan of
     * the queue's pending tasks, once per lap of the walk, which a large partitioned backlog makes
     * costly (about 5 ms at 20 000 pending tasks).
     *
     * Rows are locked FOR UPDATE SKIP LOCKED with their state and due time re-checked on the newest
     * row version: a task a business transaction holds (an enqueue replacing it, a dependant being
     * linked) is passed over, never waited for while the queue's lock is held, and a task whose due
     * time was just moved on is not claimed early.
     * Weights (weights.sql.ts): a partition of weight w has w turns a round, its first w due tasks
     * rank 1, the next w rank 2, and so on; a claim that stops part-way through the turns of the
     * cursor's partition leaves it the rest (`next_turns`), and the next round starts with them.
     * Parameters as claimFrom, and $6 per-partition limit, $7 cursor, $8 partitions with room per
     * round, $9 per-partition rate limit (NULL: none), $10 its window in ms (rate_window), $11 the
     * most partitions one claim walks, $12 the turns the cursor's partition has left (0: none),
     * $13 the module's partitionWeights (JSON object; NULL: none), $14 the claim's id (see
     * claim.sql.ts), $15 the lease tokens of the caller's ended tasks (as room's $6).
     */
    claimPartitioned: claimFrom(
      s,
      `
  SELECT t.id FROM ${s}.task t
  WHERE t.id = ANY (ARRAY (SELECT o.id FROM offered o ORDER BY o.rank, o.pos, o.n LIMIT $2))
    AND t.state = 'pending' AND t.run_at <= now()
  FOR UPDATE OF t SKIP LOCKED`,
      {
        token: '$14',
        partitioned: true,
        ctes: `running AS MATERIALIZED (
  -- As in room: the tasks whose handler ended at the caller ($15) do not count.
  SELECT coalesce(partition_key, '') AS p, count(*)::int AS n FROM ${s}.task
  WHERE queue = $1 AND state = 'running' AND lease_token <> ALL ($15::uuid[]) GROUP BY 1
), rated AS MATERIALIZED (
  -- Per-partition rate windows ('' stands for no partition): the claims inside each.
  SELECT r.partition_key AS p, ${windowCount('r.rate_at', 'r.rate_n', '$10', 'clock_timestamp()')} AS n
  FROM ${s}.rate_window r
  WHERE r.queue = $1 AND $9::int IS NOT NULL
), walk AS (
  -- Keys in round order: lap 0 from after the cursor to the last key, then '' (lap 1) and the keys
  -- up to the cursor. Produced one at a time, as round reads them.
  SELECT CASE WHEN $7::text IS NULL THEN '' ELSE coalesce(k.p, '') END AS p,
         CASE WHEN $7::text IS NOT NULL AND k.p IS NULL THEN 1 ELSE 0 END AS lap, 1 AS n
  FROM (${keyAfter(s, '$7::text')}) k
  UNION ALL
  SELECT coalesce(k.p, CASE WHEN w.lap = 0 AND $7::text IS NOT NULL THEN '' END),
         CASE WHEN k.p IS NULL THEN 1 ELSE w.lap END, w.n + 1
  FROM walk w
  -- OFFSET 0: computed once per row; flattened, the key was probed again for each of its three uses.
  CROSS JOIN LATERAL (SELECT CASE WHEN w.lap = 0 THEN (${keyAfter(s, 'w.p')}) ELSE (${keyAfter(s, 'w.p', '$7::text')}) END AS p OFFSET 0) k
  WHERE w.n < $11 AND (k.p IS NOT NULL OR (w.lap = 0 AND $7::text IS NOT NULL))
), round AS (
  -- The first $8 walked partitions with room, in walk order (the order a recursive CTE makes its
  -- rows in), after the cursor's partition when it has turns left (weights.sql.ts). Read lazily:
  -- the walk stops once they are found.
  SELECT w.p, w.n AS pos, x.top, r.room, g.weight, g.turns
  FROM (${resumedThenWalk}) w
  ${visit(s)}
  ${weighed(s)}
  WHERE r.room > 0
  LIMIT $8
), offered AS (
  SELECT c.id, ${turnOf('c.rank', 'w')} AS rank, c.rank AS n, w.pos, w.p, w.turns, w.weight
  FROM round w
  CROSS JOIN LATERAL (
    ${offer(s)}
  ) c
)`,
        // A full round ends at its last partition; a short one walked every key it could.
        extra: `(SELECT CASE WHEN count(*) < $2 THEN
                 CASE WHEN (SELECT count(*) FROM round) >= $8 THEN (SELECT p FROM round ORDER BY pos DESC LIMIT 1)
                      ELSE (SELECT w.p FROM walk w ORDER BY w.n DESC LIMIT 1) END
               ELSE (array_agg(o.p ORDER BY o.rank DESC, o.pos DESC))[1] END
        FROM ${TAKEN_OFFERS}) AS next_cursor,
       ${nextTurns} AS next_turns,
       CASE WHEN (SELECT count(*) FROM round) < $8 THEN (SELECT max(w.n) >= $11 FROM walk w) ELSE false END AS walk_cut,
       (SELECT count(*) FROM round) >= $8 AS round_full,
       coalesce((SELECT bool_or(r.n >= $6) FROM running r), false) AS partition_full,
       (SELECT count(*) FROM offered) > (SELECT count(*) FROM claimed) AS room_left`,
      },
    ),

    /**
     * Room freed in a queue with a concurrency rule that this instance will not take (it is
     * stopping): wake the queue's workers everywhere, `!room <queue>` (see ROOM_NOTICE).
     * Parameters: $1 channel, $2 queue.
     */
    announce: `SELECT pg_notify($1, '${ROOM_NOTICE}' || $2)`,

    /**
     * After a claim of a queue limited per partition: each partition's window records the claims it
     * just made (rate-window.sql.ts). Parameters: $1 queue, $2 window ms, $3 JSON [{ p, n }] (p ''
     * for no partition; JSON because a key may hold any character).
     */
    recordPartitions: `
INSERT INTO ${s}.rate_window AS r (queue, partition_key, window_ms, rate_at, rate_n)
SELECT $1, x.p, $2, ARRAY[clock_timestamp()], ARRAY[x.n] FROM json_to_recordset($3::json) AS x(p text, n int)
ON CONFLICT (queue, partition_key) DO UPDATE
SET window_ms = EXCLUDED.window_ms,
    (rate_at, rate_n) = ${windowAdd('r.rate_at', 'r.rate_n', '$2', 'EXCLUDED.rate_n[1]', 'EXCLUDED.rate_at[1]')}`,

    /**
     * After a limited claim that took `$4` tasks: the rate window records them (rate-window.sql.ts;
     * with no queue-wide rate limit it keeps nothing), the round's cursor moves to the last
     * partition served, and `room_wanted` changes as $5 says: true, a concurrency rule cut this
     * claim short while tasks were due (an instance now waits for room); false, this claim took
     * all it wanted and left room while one waited: the flag is cleared and the room announced
     * (`!room <queue>` on $6, sent at commit), so one waiting instance's wake costs one
     * notification however many tasks end. NULL leaves it. Claims are serialised by the queue's
     * lock, so no claim's flag is lost between another's read and write.
     * Parameters: $1 queue, $2 rate window ms (0: none), $3 cursor, $4 tasks just started, $5 room
     * wanted, $6 channel, $7 the turns the cursor's partition has left (weights.sql.ts).
     */
    record: `
INSERT INTO ${s}.queue_state AS q (queue, partition_cursor, partition_turns, rate_at, rate_n, room_wanted)
SELECT $1, $3, $7, CASE WHEN $2 > 0 AND $4 > 0 THEN ARRAY[now.t] ELSE '{}' END, CASE WHEN $2 > 0 AND $4 > 0 THEN ARRAY[$4::int] ELSE '{}' END,
       coalesce($5::boolean, false)
FROM (SELECT clock_timestamp() AS t) now
ON CONFLICT (queue) DO UPDATE
SET partition_cursor = EXCLUDED.partition_cursor, partition_turns = EXCLUDED.partition_turns,
    (rate_at, rate_n) = ${windowAdd('q.rate_at', 'q.rate_n', '$2', 'CASE WHEN $2 > 0 THEN $4::int ELSE 0 END', 'coalesce(EXCLUDED.rate_at[1], clock_timestamp())')},
    room_wanted = coalesce($5::boolean, q.room_wanted)
RETURNING CASE WHEN $5::boolean IS FALSE THEN pg_notify($6, '${ROOM_NOTICE}' || $1) END`,
  });
}
