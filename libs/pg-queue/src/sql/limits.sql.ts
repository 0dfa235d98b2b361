import { quoteIdent } from './identifiers';
import { marked } from './fragments.sql';
import { windowAdd, windowCount, windowFreesInMs } from './rate-window.sql';

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
     *   a modest backlog, and compiling it costs far more than the claim runs for (see JIT_OFF).
     * - plan_cache_mode force_generic_plan, for the function's statements but one: with the batch
     *   size known, a custom plan's estimate is always below the generic plan's, so the claim would
     *   be planned anew at every call, which costs more than it runs for; its generic plan is the
     *   same plan (it walks task_claim_idx however large the backlog, and for a small queue beside a
     *   large one). The partitioned claim too, since its check for due tasks without
     *   a partition reads them in task_claim_idx's order (LIMIT 1): as an EXISTS its generic plan
     *   scans the whole table beside a large queue, and custom plans would cost more planning a call
     *   than the claim runs for. The aging claim keeps custom plans (its generic plan is slower than
     *   they are).
     * Parameters: $1 queue, $2 the most tasks wanted, $3 worker id, $4 lease ms, $5 the handler's
     * maxAttempts, $6 the claim's id (claim.sql.ts), $7 the rules (JSON, see claim_limited).
     */
    claim: `SELECT claimed, next_due_in_ms, db_now_ms, paused, isolation, limit_full
FROM ${s}.claim_limited($1::text, $2::int, $3::text, $4::bigint, $5::int, $6::text, $7::jsonb)`,

    /**
     * What the queue-wide rules leave room for: its running tasks but those whose handler ended
     * at the caller ($6: their rows say running until their endings are written, a round trip
     * later; counted, a lease worker under a full limit could claim only after that write, which
     * would make a claim and a completion one after the other per cycle), and the claims inside the
     * rate window with when its oldest step leaves it; also the round's cursor and the database's
     * clock.
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
       EXISTS (SELECT 1 FROM ${s}.queue_pause qp WHERE qp.queue = $1 AND qp.partition_key = '') AS paused,
       (SELECT (extract(epoch FROM max(b.until) - c.now) * 1000)::float8 FROM ${s}.backoff b
        WHERE ((b.name = $1 AND b.scope = 'queue') OR (b.name = $5::text AND b.scope = 'limiter')) AND b.until > c.now) AS backed_off_ms
FROM c LEFT JOIN ${s}.queue_state q ON q.queue = $1`,

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
     * wanted, $6 channel, $7 the turns the cursor's partition has left (claim.sql.ts).
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
