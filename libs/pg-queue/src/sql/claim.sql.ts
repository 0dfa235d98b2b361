import { randomBytes } from 'node:crypto';
import { HELD, idList, marked } from './fragments.sql';
import { quoteIdent } from './identifiers';
import type { ClaimedRow } from './statement-values';
import { CLAIM_MAX } from '../core/task-rules';

/**
 * Claiming work: every claim statement, each read top to bottom in `statements.sql`.
 *
 * A claim is its own committed statement: it takes a lease (locked_by, a lease_token,
 * locked_until) and counts the attempt *before* the handler runs, so a task that crashes its
 * whole process is still counted and ends `dead` instead of looping forever. There are four
 * claims, one template (`claim` below) with the part that chooses the rows written per variant:
 * - plain, by ceiling (`claimUpTo`): what an instance sends for a queue without flow control;
 * - plain, aging and partitioned, run by claim_limited (limited-claim.function.ts) under the
 *   queue's lock for a queue with flow-control rules (`limitedClaims`).
 *
 * Each row's token is the claim's id (64 random bits the claimer chose, 16 hex digits) followed by
 * the task's id: unique per claimed row, as the fence needs (a lease statement matches tokens
 * against a set, not pairwise with ids: see HELD), yet known to the claimer before any answer. A
 * claimer whose answer was lost (the connection broke after the commit) can thus find the rows it
 * holds (`claimedWith`) and give them back instead of letting them wait out their leases.
 *
 * Lock decisions:
 * - `FOR UPDATE SKIP LOCKED` where the rows are chosen: concurrent claimers take disjoint rows
 *   without waiting on each other, and a row a business transaction holds is passed over, never
 *   waited for. The LIMIT applies before the UPDATE (a subquery with LIMIT or FOR UPDATE is never
 *   merged into the query around it) and only the rows taken are locked.
 * - The UPDATE finds the chosen rows by primary key (`id = ANY (ARRAY (SELECT id FROM next))`):
 *   joining `FROM next` lets the planner hash-join against a sequential scan of the whole table.
 * - The scans walk task_claim_idx (queue, priority, run_at, id) WHERE state = 'pending', so the
 *   cost does not depend on how many running, dead or finished tasks exist. A one-time probe of
 *   task_due_idx (queue, run_at) skips the scan when nothing is due, which that index's priority
 *   order would otherwise make pass over every not-yet-due row.
 * - A paused queue or partition, a cooled-down one (a 429's pause, `backoff` table) and a group
 *   whose turn it is not are never claimed: `claimable` below, one-time filters that cost an
 *   unaffected queue a few probes of tiny tables. A pause waits for claims in flight (pause.sql.ts).
 *
 * What a claim returns: its rows as one JSON array (times as epoch milliseconds; one JSON.parse
 * costs Node less than the driver's per-row and per-column work), and when it came back short,
 * when the queue's next task is due (or its cool-down ends), as a delay from the database's own
 * clock, so the worker sets its timer without polling and without trusting its own clock; the
 * database's time, from which the worker estimates how far its clock is off (DatabaseClock); and
 * when it took nothing, whether the queue is paused (an instance that missed the notice learns it
 * here: PauseWatcher).
 *
 * Parameters of every claim: $1 queue, $2 batch size, $3 worker id, $4 lease ms, $5 the claiming
 * handler's maxAttempts (the limit in force unless the enqueuer set one), then the variant's own,
 * the claim's id among them (see `token`).
 */

/** A claim's id: 64 random bits as 16 hex digits, the first half of each of its lease tokens. */
export const newClaimId = (): string => randomBytes(8).toString('hex');

/** The id of the claim that gave out lease token `token` (see above). */
export const claimIdOf = (token: string): string => token.replace(/-/g, '').slice(0, 16);

/**
 * Epoch milliseconds in float8 (extract() computes in numeric), rounded to the microsecond first:
 * date_part's seconds times 1000 can land a unit in the last place below a whole millisecond, and
 * a Date would read it 1 ms early.
 */
const epochMs = (column: string) => `(round(date_part('epoch', ${column}) * 1000000) / 1000)`;

/**
 * The fields of a claimed row, in the order of each row's array when a claim returns its rows as
 * arrays (the claim an instance sends); `claimedRows` reads them back. The queue is the claimer's own.
 */
const CLAIMED_FIELDS = ['id', 'payload', 'priority', 'run_at_ms', 'attempt', 'max_attempts', 'created_at_ms', 'lease_token', 'parent_id', 'group_key', 'dedup_key', 'trace_context'] as const;

/** A claim's rows as the plain claim returns them (JSON text), as rows of `queue`. */
export function claimedRows(json: string, queue: string): ClaimedRow[] {
  return (JSON.parse(json) as unknown[][]).map((values) => {
    const row: Record<string, unknown> = { queue };
    for (let i = 0; i < CLAIMED_FIELDS.length; i++) row[CLAIMED_FIELDS[i]] = values[i];
    return row as unknown as ClaimedRow;
  });
}

/**
 * Per-group FIFO for a candidate row `t`: only the first task of a group (by place, see
 * task_group_pos_idx) runs, and only while nothing of its group runs. Which task is first never
 * depends on the clock. A snapshot can still miss a claim of the group that commits during this
 * statement while an earlier task appears (an insert that commits late, an operator retry):
 * groupRivals, run after the claim commits, catches that before any handler starts.
 * Two probes of task_group_pos_idx: "anything before it?" is a range bound that stops at the first
 * hit (most group tasks fail it at once); only a group's first task pays for the second.
 */
const groupFirst = (s: string) => `(t.group_key IS NULL OR (
        NOT EXISTS (SELECT 1 FROM ${s}.task g
                    WHERE g.queue = t.queue AND g.group_key = t.group_key AND g.state IN ('pending', 'running')
                      AND coalesce(g.group_pos, g.id) < coalesce(t.group_pos, t.id))
        AND NOT EXISTS (SELECT 1 FROM ${s}.task g
                        WHERE g.queue = t.queue AND g.group_key = t.group_key AND g.state = 'running')))`;

/**
 * A pending task `t` of queue $1 that a claim may take whatever its order. Each test is evaluated
 * left to right and starts with a probe the planner makes a one-time filter:
 * - the queue is not paused as a whole (a probe of queue_pause's primary key), nor the task's
 *   partition (a per-row probe only while the queue has a paused partition);
 * - no cool-down holds the queue, nor the task's partition (probes of backoff_scope_idx, per row
 *   only while one is in force);
 * - it is its group's next (groupFirst).
 */
const claimable = (s: string) => `NOT EXISTS (SELECT 1 FROM ${s}.queue_pause qp WHERE qp.queue = $1 AND qp.partition_key = '')
      AND (NOT EXISTS (SELECT 1 FROM ${s}.queue_pause qp WHERE qp.queue = $1 AND qp.partition_key <> '')
           OR t.partition_key IS NULL
           OR NOT EXISTS (SELECT 1 FROM ${s}.queue_pause qp WHERE qp.queue = $1 AND qp.partition_key = t.partition_key))
      AND (NOT EXISTS (SELECT 1 FROM ${s}.backoff b WHERE b.name = $1 AND b.scope IN ('queue', 'partition') AND b.until > now())
           OR (NOT EXISTS (SELECT 1 FROM ${s}.backoff b WHERE b.name = $1 AND b.scope = 'queue' AND b.until > now())
               AND NOT EXISTS (SELECT 1 FROM ${s}.backoff b WHERE b.name = $1 AND b.scope = 'partition' AND b.until > now()
                                                            AND b.partition_key = coalesce(t.partition_key, ''))))
      AND ${groupFirst(s)}`;

/** How a claim variant chooses its rows: CTEs before `next`, `next` itself (ids, locked), and its own result columns. */
interface ClaimVariant {
  /** The parameter that carries the claim's id. */
  token: string;
  /** CTEs that `next` reads (a WITH RECURSIVE list). */
  ctes?: string;
  /** The ids to take, at most $2, locked FOR UPDATE SKIP LOCKED. */
  next: string;
  /**
   * Rows as arrays of CLAIMED_FIELDS (the claim an instance sends: building an object per row, with
   * every column's name, is a large part of its server time), or as objects with their
   * partition: claim_limited's result, which instances of every release read.
   */
  rows: 'arrays' | 'objects';
  /** More result columns (may read `claimed`, `c`, and the CTEs). */
  extra?: string;
}

/** The one claim template: take the rows `next` chose as leases, and say what the worker needs next (see above). */
function claim(s: string, v: ClaimVariant): string {
  const rows = v.rows === 'arrays' ? `json_build_array(${CLAIMED_FIELDS.map((f) => `c.${f}`).join(', ')})` : 'c';
  return `
WITH ${v.ctes ? `RECURSIVE ${v.ctes},
` : ''}next AS (${v.next}
), claimed AS (
  UPDATE ${s}.task t
  SET state = 'running',
      attempt = t.attempt + 1,
      attempt_limit = coalesce(t.max_attempts, $5),
      locked_by = $3,
      lease_token = (${v.token}::text || lpad(to_hex(t.id), 16, '0'))::uuid,
      locked_until = now() + $4 * interval '1 millisecond',
      started_at = now(),
      finished_at = NULL
  WHERE t.id = ANY (ARRAY (SELECT id FROM next))
  RETURNING t.id::text AS id, t.queue, t.payload, t.priority, ${epochMs('t.run_at')} AS run_at_ms, t.attempt, t.attempt_limit AS max_attempts,
            ${epochMs('t.created_at')} AS created_at_ms, t.lease_token::text AS lease_token, t.parent_id::text AS parent_id,
            t.group_key, t.dedup_key, t.trace_context${v.rows === 'objects' ? ', t.partition_key' : ''}
)
SELECT coalesce(json_agg(${rows}), '[]')::text AS claimed,
       -- A claim that came back short: when the next task is due, or a cool-down of the queue or a partition ends.
       CASE WHEN count(*) < $2 THEN least(
         (SELECT (extract(epoch FROM min(d.run_at) - now()) * 1000)::float8 FROM ${s}.task d
          WHERE d.queue = $1 AND d.state = 'pending' AND d.run_at > now()),
         (SELECT (extract(epoch FROM min(b.until) - now()) * 1000)::float8 FROM ${s}.backoff b
          WHERE b.name = $1 AND b.scope IN ('queue', 'partition') AND b.until > now())
       ) END AS next_due_in_ms,
       (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS db_now_ms,
       CASE WHEN count(*) = 0 THEN EXISTS (SELECT 1 FROM ${s}.queue_pause qp WHERE qp.queue = $1 AND qp.partition_key = '') END AS paused${v.extra ? `,
       ${v.extra}` : ''}
FROM claimed c`;
}

/** The plain claim's choice: the queue's first due tasks in claim order, at most `limit`, locked. */
const firstDue = (s: string, limit: string | number) => `
  SELECT t.id FROM ${s}.task t
  WHERE t.queue = $1 AND t.state = 'pending' AND t.run_at <= now()
    -- One-time check that anything is due: the queue's earliest due time, an ordered probe of
    -- task_due_idx (an EXISTS could be planned as a sequential scan that walks every delayed row).
    AND (SELECT min(d.run_at) FROM ${s}.task d WHERE d.queue = $1 AND d.state = 'pending') <= now()
    AND ${claimable(s)}
  ORDER BY t.priority, t.run_at, t.id
  LIMIT ${limit}
  FOR UPDATE OF t SKIP LOCKED`;

/**
 * The ceilings of the plain claim an instance sends: a claim of n rows runs the first at least n.
 * Each picks up to its ceiling and takes the first $2: the same rows as `LIMIT $2` alone, but a
 * plan the plan cache keeps. A LIMIT that is a parameter is costed as a tenth of the rows below
 * it, so with `LIMIT $2` alone the generic plan would look like reading a tenth of the queue and
 * every execution would be planned anew. A tier's claims take at least a tenth of its ceiling, so
 * its generic plan costs no more than their custom ones and is kept after five executions.
 * No ORDER BY outside: the rows come in the inner scan's order, and a sort there would pull, and
 * lock, all `ceiling` rows before the first is taken (claim.spec checks that a claim locks only
 * what it takes).
 */
const CLAIM_TIERS = [10, 100, CLAIM_MAX];

const plainClaim = (s: string, ceiling: number): string =>
  claim(s, {
    token: '$6',
    rows: 'arrays',
    next: `
  SELECT p.id FROM (${firstDue(s, ceiling)}
  ) p
  LIMIT $2`,
  });

/**
 * The aging claim (handler option `priorityAgingMs`, A): a due task's effective priority is its
 * priority less the time since it became due (run_at) over A, so waiting A raises it one level.
 * Claims take the least effective priority first, ties by due time, then id: ordering by
 * `priority * A + run_at` (in ms) is the same order, and does not move with the clock. So a task of
 * priority p due at T runs before every task of a more urgent priority q that became due after
 * T + (p - q) * A: a steady stream of priority-q tasks delays it at most (p - q) * A.
 *
 * No index holds that order (A is a handler's setting, and may change), but one level's due tasks
 * are in it already: task_claim_idx orders them by due time. So the claim reads, for each of the
 * AGING_LEVELS most urgent priorities with pending tasks (a skip scan of that index, one probe a
 * level), its first due tasks up to the batch size, and takes the batch's best of them by
 * effective priority: at most AGING_LEVELS × batch rows read whatever the backlog. Those levels
 * may hold only delayed or retrying tasks while due work waits at a less urgent priority: the
 * plain claim's candidates join them, so an aging claim never takes less than a plain one would.
 *
 * Run under the queue's lock: claimers never contend for the same best rows, which are chosen
 * before they are locked (SKIP LOCKED then passes over only rows a business transaction holds).
 * Parameters: $6 priorityAgingMs, $7 the most levels read (AGING_LEVELS), $8 the claim's id.
 */
export const AGING_LEVELS = 32;

const agingClaim = (s: string): string =>
  claim(s, {
    token: '$8',
    rows: 'objects',
    ctes: `levels AS (
  -- The queue's priorities with pending tasks, most urgent first: one probe of task_claim_idx each.
  SELECT (SELECT min(t.priority) FROM ${s}.task t WHERE t.queue = $1 AND t.state = 'pending') AS p, 1 AS n
  UNION ALL
  SELECT (SELECT min(t.priority) FROM ${s}.task t WHERE t.queue = $1 AND t.state = 'pending' AND t.priority > l.p), l.n + 1
  FROM levels l
  WHERE l.p IS NOT NULL AND l.n < $7
), aged AS MATERIALIZED (
  -- Each level's first due tasks, by due time (its effective priority order), with their key.
  SELECT c.id, c.key
  FROM levels l
  CROSS JOIN LATERAL (
    SELECT t.id, t.priority * $6::numeric + extract(epoch FROM t.run_at) * 1000 AS key
    FROM ${s}.task t
    WHERE t.queue = $1 AND t.state = 'pending' AND t.priority = l.p AND t.run_at <= now()
      AND ${claimable(s)}
    ORDER BY t.run_at, t.id
    LIMIT $2
  ) c
  WHERE l.p IS NOT NULL
  UNION
  -- The plain claim's candidates (see above).
  (SELECT t.id, t.priority * $6::numeric + extract(epoch FROM t.run_at) * 1000 AS key
   FROM ${s}.task t
   WHERE t.queue = $1 AND t.state = 'pending' AND t.run_at <= now()
     AND ${claimable(s)}
   ORDER BY t.priority, t.run_at, t.id
   LIMIT $2)
)`,
    next: `
  SELECT t.id FROM ${s}.task t
  WHERE t.id = ANY (ARRAY (SELECT a.id FROM aged a ORDER BY a.key, a.id LIMIT $2))
    AND t.state = 'pending' AND t.run_at <= now()
  FOR UPDATE OF t SKIP LOCKED`,
  });

/**
 * The partitioned claim (per-partition concurrency or rate limit): partitions with claimable
 * work take turns.
 *
 * The round (CTE `walk`) visits partitions in key order (the database's collation), starting after
 * the cursor ($7, the partition where the last round stopped; NULL: from the start) and wrapping
 * around once. '' stands for the tasks without a partition: a partition of their own, ahead of
 * every key (a partition key is never ''). Each partition visited gets its `room`: what its
 * concurrency ($6 minus its running tasks) and its rate window ($9 per $10 ms) leave, 0 when it is
 * paused or cooled down or none of its due tasks may start (groupFirst). The walk ends once $8
 * partitions with room were found, after $11 partitions, or when it is back at the cursor:
 * partitions with nothing to offer (delayed tasks only, held back by their group, full, out of
 * rate) are passed over without using up the round. A partition at its limit, as many are when
 * slots free one at a time, costs the walk no probe of its tasks.
 *
 * Each partition with room offers its first due tasks, as many as its room; the claim takes them
 * by rank, then by place in the round: the first task of every partition before the second of
 * any. So a partition with 10 000 tasks waiting gets one turn per round, like one with 10.
 *
 * Weights: a partition of weight w (the enqueue option `weight`, the latest enqueue that gave one
 * having set `partition_weight`; else the module's `partitionWeights`, $13; else 1) has w turns a
 * visit: its first w offered tasks rank 1, its next w rank 2, and so on. A claim that ends
 * part-way through the turns of its last partition leaves the rest to the next claim ($12, kept in
 * queue_state.partition_turns), which visits that partition first. Weights change no bound: a
 * partition still offers at most its room, the round visits at most $8 partitions with room.
 *
 * The claim returns where the next round starts (`next_cursor`): after the last partition it took
 * a task from (by rank, then place) when it filled its batch, so the partitions after it have
 * their turn first in the next claim, else (every partition with room gave all it could) after the
 * last partition walked, so the next claim never walks again what this one passed over; and the
 * turns that partition keeps (`next_turns`). For freed-room announcements it also says whether a
 * partition is at its limit (`partition_full`) and whether the round offered more than the claim
 * took (`room_left`); `walk_cut` and `round_full` tell claim_limited to look again soon.
 *
 * Costs: the keys come from a skip scan of task_partition_idx (one probe per partition, however
 * many tasks each has). A partition's due check and its offer scan its tasks in claim order up to
 * (its highest priority, now), an index range bound. No index holds only the tasks without a
 * partition (it would hold every plain queue's too): checking them scans the queue's pending
 * tasks, once per lap of the walk.
 *
 * Rows are locked FOR UPDATE SKIP LOCKED with their state and due time re-checked on the newest
 * row version: a task whose due time was just moved on is not claimed early.
 * Parameters: $6 per-partition limit, $7 cursor, $8 partitions with room per round, $9
 * per-partition rate limit (NULL: none), $10 its window in ms, $11 the most partitions one claim
 * walks, $12 the turns the cursor's partition has left (0: none), $13 the module's
 * partitionWeights (JSON object; NULL: none), $14 the claim's id, $15 the lease tokens of the
 * caller's tasks whose handler ended and whose ending is not written yet (uuid[]; they do not count
 * as running, see `room` in limits.sql.ts).
 */
const partitionedClaim = (s: string): string =>
  claim(s, {
    token: '$14',
    rows: 'objects',
    ctes: `running AS MATERIALIZED (
  -- Running tasks by partition ('' for none).
  SELECT coalesce(partition_key, '') AS p, count(*)::int AS n FROM ${s}.task
  WHERE queue = $1 AND state = 'running' AND lease_token <> ALL ($15::uuid[]) GROUP BY 1
), rated AS MATERIALIZED (
  -- Claims inside each partition's rate window (an entry counts while its latest claim is inside: rate-window.sql.ts).
  SELECT r.partition_key AS p,
         (SELECT coalesce(sum(e.n), 0)::int FROM unnest(r.rate_at, r.rate_n) AS e(at, n)
          WHERE e.at > clock_timestamp() - ($10)::float8 * interval '1 millisecond') AS n
  FROM ${s}.rate_window r
  WHERE r.queue = $1 AND $9::int IS NOT NULL
), walk AS (
  -- Keys in round order: lap 0 from after the cursor to the last key, then '' (lap 1) and the keys
  -- up to the cursor. Produced one at a time, as round reads them; each key one probe of task_partition_idx.
  SELECT CASE WHEN $7::text IS NULL THEN '' ELSE coalesce(k.p, '') END AS p,
         CASE WHEN $7::text IS NOT NULL AND k.p IS NULL THEN 1 ELSE 0 END AS lap, 1 AS n
  FROM (SELECT min(t.partition_key) AS p FROM ${s}.task t
        WHERE t.queue = $1 AND t.state = 'pending' AND t.partition_key > $7::text) k
  UNION ALL
  SELECT coalesce(k.p, CASE WHEN w.lap = 0 AND $7::text IS NOT NULL THEN '' END),
         CASE WHEN k.p IS NULL THEN 1 ELSE w.lap END, w.n + 1
  FROM walk w
  -- OFFSET 0: computed once per row; flattened, the key was probed again for each of its three uses.
  CROSS JOIN LATERAL (
    SELECT CASE WHEN w.lap = 0
                THEN (SELECT min(t.partition_key) FROM ${s}.task t
                      WHERE t.queue = $1 AND t.state = 'pending' AND t.partition_key > w.p)
                ELSE (SELECT min(t.partition_key) FROM ${s}.task t
                      WHERE t.queue = $1 AND t.state = 'pending' AND t.partition_key > w.p AND t.partition_key <= $7::text)
           END AS p
    OFFSET 0
  ) k
  WHERE w.n < $11 AND (k.p IS NOT NULL OR (w.lap = 0 AND $7::text IS NOT NULL))
), round AS (
  -- The first $8 walked partitions with room, in walk order (the order a recursive CTE makes its
  -- rows in), after the cursor's partition when it has turns left. Read lazily: the walk stops
  -- once they are found. Each LATERAL is a subquery of its own (OFFSET 0), evaluated once per
  -- partition: flattened, the room would be computed again for the filter on it.
  SELECT w.p, w.n AS pos, x.top, r.room, g.weight, g.turns
  FROM (SELECT $7::text AS p, 0 AS n WHERE $12::int > 0 AND $7::text IS NOT NULL
        UNION ALL
        SELECT k.p, k.n FROM walk k WHERE $12::int = 0 OR k.p IS DISTINCT FROM $7::text) w
  -- What its concurrency limit and its rate window leave.
  CROSS JOIN LATERAL (
    SELECT greatest(least($6 - coalesce((SELECT n FROM running WHERE running.p = w.p), 0),
                          coalesce($9::int - coalesce((SELECT n FROM rated WHERE rated.p = w.p), 0), $6)), 0) AS cap
    OFFSET 0
  ) c
  -- Its least urgent pending priority: where its claim-order range ends (see offered).
  CROSS JOIN LATERAL (
    SELECT CASE WHEN c.cap > 0 THEN (SELECT max(m.priority) FROM ${s}.task m
                                     WHERE m.queue = $1 AND m.state = 'pending' AND m.partition_key = w.p) END AS top
    OFFSET 0
  ) x
  -- Its room: 0 when paused, cooled down, or without a due task its group lets run. Tasks without
  -- a partition are looked for in claim order (LIMIT 1, task_claim_idx), which a generic plan
  -- reads as one queue's index range: as an EXISTS it chose a scan of the whole table.
  CROSS JOIN LATERAL (
    SELECT CASE WHEN c.cap = 0 THEN 0
                WHEN w.p <> '' AND EXISTS (SELECT 1 FROM ${s}.queue_pause qp WHERE qp.queue = $1 AND qp.partition_key <> '')
                     AND EXISTS (SELECT 1 FROM ${s}.queue_pause qp WHERE qp.queue = $1 AND qp.partition_key = w.p) THEN 0
                WHEN EXISTS (SELECT 1 FROM ${s}.backoff b
                             WHERE b.name = $1 AND b.scope = 'partition' AND b.until > now() AND b.partition_key = w.p) THEN 0
                WHEN (CASE WHEN w.p = ''
                           THEN (SELECT 1 FROM ${s}.task t
                                 WHERE t.queue = $1 AND t.state = 'pending' AND t.partition_key IS NULL AND t.run_at <= now()
                                   AND ${groupFirst(s)}
                                 ORDER BY t.priority, t.run_at, t.id LIMIT 1) IS NOT NULL
                           ELSE EXISTS (SELECT 1 FROM ${s}.task t, (SELECT w.p, x.top) pt
                                        WHERE t.queue = $1 AND t.state = 'pending' AND t.partition_key = pt.p
                                          AND (t.priority, t.run_at) <= (pt.top, now()) AND t.run_at <= now()
                                          AND ${groupFirst(s)}) END)
                THEN c.cap
                ELSE 0 END AS room
    OFFSET 0
  ) r
  -- Its weight, and its turns in this visit: all of them, or what the last claim left the resumed cursor's partition.
  CROSS JOIN LATERAL (
    SELECT v.weight, CASE WHEN w.n = 0 THEN least($12::int, v.weight) ELSE v.weight END AS turns
    FROM (SELECT coalesce((SELECT pw.weight FROM ${s}.partition_weight pw WHERE pw.queue = $1 AND pw.partition_key = w.p),
                          ($13::jsonb ->> w.p)::int, 1) AS weight) v
    OFFSET 0
  ) g
  WHERE r.room > 0
  LIMIT $8
), offered AS (
  -- Each partition's first due tasks in claim order, at most its room, ranked by turn. A keyed
  -- partition reads its claim-order range up to (its least urgent priority, now), an index range
  -- bound that never reads that priority's delayed tasks; two branches, not one CASE, so that each
  -- is an index condition of its own.
  SELECT c.id, CASE WHEN c.rank <= w.turns THEN 1 ELSE 2 + (c.rank - w.turns - 1) / w.weight END AS rank,
         c.rank AS n, w.pos, w.p, w.turns, w.weight
  FROM round w
  CROSS JOIN LATERAL (
    (SELECT t.id, row_number() OVER (ORDER BY t.priority, t.run_at, t.id) AS rank FROM ${s}.task t
     WHERE w.p <> '' AND t.queue = $1 AND t.state = 'pending' AND t.partition_key = w.p
       AND (t.priority, t.run_at) <= (w.top, now()) AND t.run_at <= now()
       AND ${groupFirst(s)}
     ORDER BY t.priority, t.run_at, t.id
     LIMIT w.room)
    UNION ALL
    (SELECT t.id, row_number() OVER (ORDER BY t.priority, t.run_at, t.id) AS rank FROM ${s}.task t
     WHERE w.p = '' AND t.queue = $1 AND t.state = 'pending' AND t.partition_key IS NULL AND t.run_at <= now()
       AND ${groupFirst(s)}
     ORDER BY t.priority, t.run_at, t.id
     LIMIT w.room)
  ) c
)`,
    next: `
  SELECT t.id FROM ${s}.task t
  WHERE t.id = ANY (ARRAY (SELECT o.id FROM offered o ORDER BY o.rank, o.pos, o.n LIMIT $2))
    AND t.state = 'pending' AND t.run_at <= now()
  FOR UPDATE OF t SKIP LOCKED`,
    // A full batch ends the round at the last partition it took from (by rank, then place); a
    // short one at the round's last partition when the round was full, else where the walk ended.
    // The turns kept: that partition's last rank's turns less what it gave there (its nth task
    // closes its turns + (rank - 1) * weight). An int like queue_state.partition_turns: as a
    // bigint the driver hands it over as a BigInt, which never equals the number it is compared with.
    extra: `(SELECT CASE WHEN count(*) < $2 THEN
                 CASE WHEN (SELECT count(*) FROM round) >= $8 THEN (SELECT p FROM round ORDER BY pos DESC LIMIT 1)
                      ELSE (SELECT w.p FROM walk w ORDER BY w.n DESC LIMIT 1) END
               ELSE (array_agg(o.p ORDER BY o.rank DESC, o.pos DESC))[1] END
        FROM offered o WHERE o.id IN (SELECT c.id::bigint FROM claimed c)) AS next_cursor,
       (SELECT CASE WHEN count(*) < $2 THEN 0
               ELSE greatest((array_agg(o.turns + (o.rank - 1) * o.weight - o.n ORDER BY o.rank DESC, o.pos DESC, o.n DESC))[1], 0) END
        FROM offered o WHERE o.id IN (SELECT c.id::bigint FROM claimed c))::int AS next_turns,
       CASE WHEN (SELECT count(*) FROM round) < $8 THEN (SELECT max(w.n) >= $11 FROM walk w) ELSE false END AS walk_cut,
       (SELECT count(*) FROM round) >= $8 AS round_full,
       coalesce((SELECT bool_or(r.n >= $6) FROM running r), false) AS partition_full,
       (SELECT count(*) FROM offered) > (SELECT count(*) FROM claimed) AS room_left`,
  });

/**
 * The claims claim_limited runs under the queue's lock (limited-claim.function.ts), with their
 * parameters bound to its variables: plain (as the instance's, but rows as objects and `LIMIT $2`:
 * the function keeps one generic plan per connection, it sets force_generic_plan), aging and
 * partitioned (above).
 */
export function limitedClaims(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    plain: claim(s, { token: '$6', rows: 'objects', next: firstDue(s, '$2') }),
    aging: agingClaim(s),
    partitioned: partitionedClaim(s),
  });
}

/** The plain claim's statement for a claim of `limit` rows (see CLAIM_TIERS). */
export function claimSql(statements: { claimUpTo: Readonly<Record<number, string>> }, limit: number): string {
  const ceiling = CLAIM_TIERS.find((c) => limit <= c);
  if (ceiling === undefined) throw new RangeError(`pg-queue: a claim takes at most ${CLAIM_MAX} tasks, asked for ${limit}`);
  return statements.claimUpTo[ceiling];
}

export function claimStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    /** The plain claim by ceiling (see claimSql). */
    claimUpTo: Object.fromEntries(CLAIM_TIERS.map((c) => [c, plainClaim(s, c)])) as Readonly<Record<number, string>>,

    /**
     * The leases that claims of queue $1 took and still hold, by the claims' ids ($2, comma-
     * separated): for a claimer whose answers were lost (see above), which gives them back, fenced
     * like any release. Reads the queue's running rows (its task_running_idx range), once after a
     * broken connection. Returns each row's id and token.
     */
    claimedWith: `
SELECT t.id::text AS id, t.lease_token::text AS token FROM ${s}.task t
WHERE t.queue = $1 AND t.state = 'running'
  AND left(replace(t.lease_token::text, '-', ''), 16) = ANY (string_to_array($2, ','))`,

    /**
     * The group tasks among just-claimed leases that another running task of their group rivals.
     * Run after the claim committed, so its snapshot sees every claim of those groups that
     * committed before: of two rival claims, the later check always sees the other, so at least
     * one of them gives way (released uncounted) and never do two tasks of a group run at once.
     * Parameters: $1 ids, $2 lease tokens (see HELD).
     */
    groupRivals: `
SELECT ${idList('t.id')} AS ids
FROM ${s}.task t
WHERE ${HELD} AND t.group_key IS NOT NULL
  AND EXISTS (SELECT 1 FROM ${s}.task g
              WHERE g.queue = t.queue AND g.group_key = t.group_key AND g.state = 'running' AND g.id <> t.id)`,

    /**
     * Transactional mode, first statement of the handler transaction: re-check that each lease is
     * still ours and row-lock it until commit. FOR KEY SHARE, the weakest row lock: it still keeps
     * out the rescuer (FOR UPDATE SKIP LOCKED) and any DELETE, so no one takes the task over, but it
     * does not conflict with an UPDATE of non-key columns. An enqueue with onConflict
     * 'rerun'/'replace' for this task's key therefore returns at once instead of waiting for the
     * handler's whole transaction (docs/design.md, "Enqueue never waits for a handler"); complete.sql.ts reads its rerun request at the end.
     * No SKIP: nothing else holds these rows for long.
     * The same statement bounds how long this transaction may sit idle: a worker that stalls
     * (paused, partitioned) mid-handler has its transaction ended by the server, which releases the
     * rows to the rescuer and rolls back the stalled attempt's writes. It also bounds every later
     * statement (a backstop: the runner cancels a handler's statement once the handler is given
     * up on, see cancelStatement) and reports the backend and the transaction's id, which that
     * cancel needs (the row lock has given the transaction an xid).
     * Rows are found by primary key and fenced by token (HELD in fragments.sql).
     * Parameters: $1 ids, $2 lease tokens (see HELD), $3 idle-in-transaction limit in ms (text),
     * $4 statement timeout in ms (text).
     */
    lockLeases: `
WITH held AS (
  SELECT t.id
  FROM ${s}.task t
  CROSS JOIN (SELECT set_config('idle_in_transaction_session_timeout', $3, true),
                     set_config('statement_timeout', $4, true)) AS limits
  WHERE ${HELD}
  FOR KEY SHARE OF t
)
SELECT ${idList('id')} AS ids, pg_backend_pid() AS backend_pid, pg_current_xact_id()::text AS xact_id FROM held`,
  });
}
