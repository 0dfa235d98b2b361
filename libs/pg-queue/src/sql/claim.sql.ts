import { randomBytes } from 'node:crypto';
import { HELD, idList, marked } from './fragments.sql';
import { quoteIdent } from './identifiers';
import { backOffEndsInMs, notBackedOff } from './backoff.sql';
import { partitionNotPaused, queueNotPaused } from './pause.sql';
import type { ClaimedRow } from './statement-values';
import { CLAIM_MAX } from '../core/task-rules';

/**
 * Claiming work. A claim is its own committed statement: it takes a lease (locked_by, a
 * lease_token, locked_until) and counts the attempt *before* the handler runs, so a task that
 * crashes its whole process is still counted and ends `dead` instead of looping forever.
 *
 * Each row's token is the claim's id (64 random bits the claimer chose, 16 hex digits) followed by
 * the task's id: unique per claimed row, as the fence needs (a lease statement matches tokens
 * against a set, not pairwise with ids: see HELD), yet known to the claimer before any answer. A
 * claimer whose answer was lost (the connection broke after the commit) can thus find the rows it
 * holds (`claimedWith`) and give them back instead of letting them wait out their leases. Cheaper
 * than gen_random_uuid() per row, too.
 *
 * Lock decisions:
 * - `FOR UPDATE SKIP LOCKED` in the `next` CTE: concurrent claimers take disjoint rows without
 *   waiting on each other; the LIMIT applies before the UPDATE (a subquery with LIMIT or FOR
 *   UPDATE is never merged into the query around it) and only the rows taken are locked.
 * - The UPDATE finds the chosen rows as `id = ANY (ARRAY (SELECT id FROM next))`: a primary-key
 *   lookup per row. Joining `FROM next` let the planner hash-join against a sequential scan of the
 *   whole table, which cost as much as the rest of the claim at 20 000 pending tasks.
 * - The claimed rows come back as one JSON array (times as epoch milliseconds): the driver stack's
 *   per-row and per-column work cost more Node CPU than a single JSON.parse of the same data. The
 *   plain claim sends each row as an array of its fields (claimedRows reads them back): building
 *   an object per row, with every column's name, cost about a fifth of the claim's server time.
 * - The scan walks task_claim_idx (queue, priority, run_at, id) WHERE state = 'pending', so the cost
 *   does not depend on how many running, dead or finished tasks exist. That index orders by
 *   priority first, so its scan passes over the queue's not-yet-due rows: a one-time probe of
 *   task_due_idx (queue, run_at) skips the scan when nothing is due, which keeps a claim that finds
 *   nothing flat however many delayed tasks and retries wait.
 * - A claim that comes back short also says when the queue's next task is due, as a delay from the
 *   database's own clock (another probe of task_due_idx): the worker sets its timer from that, so
 *   every due time is met without polling and without trusting the app's clock. It returns the
 *   database's time too, from which the worker estimates how far its clock is off (see
 *   DatabaseClock) to read the due times that notifications carry.
 * - A paused queue or partition is never claimed (pause.sql.ts): a probe of the tiny queue_pause
 *   table per claim, one-time filters that cost an unpaused queue two primary-key probes. A
 *   backed-off one neither (backoff.sql.ts): one more probe, of the tiny backoff table.
 *
 * Parameters: $1 queue, $2 batch size, $3 worker id, $4 lease ms, $5 the claiming handler's
 * maxAttempts (the limit in force unless the enqueuer set one), $6 the claim's id (see above).
 */
/** A claim's id: 64 random bits as 16 hex digits, the first half of each of its lease tokens. */
export const newClaimId = (): string => randomBytes(8).toString('hex');

/** The id of the claim that gave out lease token `token` (see above). */
export const claimIdOf = (token: string): string => token.replace(/-/g, '').slice(0, 16);

const EPOCH_MS = (column: string) => `(extract(epoch FROM ${column}) * 1000)::float8`;
/**
 * The same in float8 throughout (extract() computes in numeric, ~1 µs a value), rounded to the
 * microsecond first: date_part's seconds times 1000 can land a unit in the last place below a
 * whole millisecond (about 3 % of the milliseconds of 2001-2042), and a Date would read it 1 ms early.
 */
const EPOCH_MS_FLOAT = (column: string) => `(round(date_part('epoch', ${column}) * 1000000) / 1000)`;

/**
 * The fields of a claimed row, in the order of each row's array when a claim returns its rows as
 * arrays (`rowsAs: 'arrays'`, see claimFrom); `claimedRows` reads them back. The queue is the
 * claimer's own.
 */
const CLAIMED_FIELDS = ['id', 'payload', 'priority', 'run_at_ms', 'attempt', 'max_attempts', 'created_at_ms', 'lease_token', 'parent_id', 'group_key', 'dedup_key', 'trace_context'] as const;

/** A claim's rows as `rowsAs: 'arrays'` returns them (JSON text), as rows of `queue`. */
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
export const groupFirst = (s: string) => `(t.group_key IS NULL OR (
      NOT EXISTS (SELECT 1 FROM ${s}.task g
                  WHERE g.queue = t.queue AND g.group_key = t.group_key AND g.state IN ('pending', 'running')
                    AND coalesce(g.group_pos, g.id) < coalesce(t.group_pos, t.id))
      AND NOT EXISTS (SELECT 1 FROM ${s}.task g
                      WHERE g.queue = t.queue AND g.group_key = t.group_key AND g.state = 'running')))`;

/**
 * A pending task `t` that a claim may take whatever its order: its queue and partition are not
 * paused (pause.sql.ts: the whole queue a one-time filter, a partition per row only while the queue
 * has a paused partition), no back-off holds it (backoff.sql.ts: likewise one-time unless one is in
 * force), and it is its group's next (groupFirst).
 */
export const claimable = (s: string) => `${queueNotPaused(s)} AND ${partitionNotPaused(s)} AND ${notBackedOff(s)} AND ${groupFirst(s)}`;

/**
 * A claim: take the rows `next` chooses (ids, at most $2, locked FOR UPDATE SKIP LOCKED), as
 * leases. `next` differs between the plain claim (the scan below) and the partitioned one
 * (limits.sql.ts, which runs it under the queue's lock); the lease taking and the result are the
 * same. `ctes` go before `next` (which may read them), `extra` adds result columns (which may read
 * them and `claimed`).
 * Parameters: $1 queue, $2 batch size, $3 worker id, $4 lease ms, $5 the claiming handler's
 * maxAttempts (the limit in force unless the enqueuer set one); `token` names the parameter that
 * carries the claim's id (see above); `next` may use more.
 * `partitioned`: the rows carry their partition back.
 */
export function claimFrom(
  s: string,
  next: string,
  { token = '$6', partitioned = false, ctes = '', extra = '', rowsAs = 'objects' }: { token?: string; partitioned?: boolean; ctes?: string; extra?: string; rowsAs?: 'objects' | 'arrays' } = {},
): string {
  // Objects, as claim_limited has returned them since its first release (instances of older
  // releases read its result during a rolling deploy); arrays where each instance sends the text
  // itself (see above), with the epoch in float8 as well. The arrays carry no partition.
  if (rowsAs === 'arrays' && partitioned) throw new Error('claimFrom: rows as arrays carry no partition_key (CLAIMED_FIELDS)');
  const epochMs = rowsAs === 'arrays' ? EPOCH_MS_FLOAT : EPOCH_MS;
  const rows = rowsAs === 'arrays' ? `json_build_array(${CLAIMED_FIELDS.map((f) => `c.${f}`).join(', ')})` : 'c';
  return `
WITH ${ctes ? `RECURSIVE ${ctes},
` : ''}next AS (${next}
), claimed AS (
  UPDATE ${s}.task t
  SET state = 'running',
      attempt = t.attempt + 1,
      attempt_limit = coalesce(t.max_attempts, $5),
      locked_by = $3,
      lease_token = (${token}::text || lpad(to_hex(t.id), 16, '0'))::uuid,
      locked_until = now() + $4 * interval '1 millisecond',
      started_at = now(),
      finished_at = NULL
  WHERE t.id = ANY (ARRAY (SELECT id FROM next))
  RETURNING t.id::text AS id, t.queue, t.payload, t.priority, ${epochMs('t.run_at')} AS run_at_ms, t.attempt, t.attempt_limit AS max_attempts,
            ${epochMs('t.created_at')} AS created_at_ms, t.lease_token::text AS lease_token, t.parent_id::text AS parent_id,
            t.group_key, t.dedup_key, t.trace_context${partitioned ? ', t.partition_key' : ''}
)
SELECT coalesce(json_agg(${rows}), '[]')::text AS claimed,
       -- With a back-off of the queue or a partition in force (backoff.sql.ts), its end counts as a due time.
       CASE WHEN count(*) < $2 THEN least((
         SELECT (extract(epoch FROM min(d.run_at) - now()) * 1000)::float8 FROM ${s}.task d
         WHERE d.queue = $1 AND d.state = 'pending' AND d.run_at > now()
       ), ${backOffEndsInMs(s)}) END AS next_due_in_ms,
       (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS db_now_ms,
       -- A claim that took nothing says whether the queue is paused: an instance that missed the
       -- notice learns it here (see PauseWatcher).
       CASE WHEN count(*) = 0 THEN NOT ${queueNotPaused(s)} END AS paused${extra ? `,
       ${extra}` : ''}
FROM claimed c`;
}

/** The queue's first due tasks in claim order, at most `limit` of them, locked: the plain claim's choice. */
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
 * The plain claim as claim_limited runs it for a queue without partitions: the text its releases
 * pinned, rows as objects (instances of those releases read them). The function keeps one
 * generic plan per connection for it (it sets force_generic_plan).
 */
export const plainClaimInFunction = (s: string): string => claimFrom(s, firstDue(s, '$2'));

/**
 * The ceilings of the plain claim's statements: a claim of n rows runs the first at least n (see
 * plainClaim, claimSql).
 */
const CLAIM_TIERS = [10, 100, CLAIM_MAX];

/**
 * The plain claim an instance sends, for claims of at most `ceiling` rows: it picks up to
 * `ceiling` due tasks and takes the first $2 of them. Same rows as `LIMIT $2` alone, but a plan
 * the plan cache keeps. A LIMIT that is a parameter is costed as a tenth of the rows below it, so
 * with `LIMIT $2` alone the generic plan looked like reading a tenth of the queue and every
 * execution of the prepared statement was planned anew: ~1 ms, five times the run of a claim of
 * one. A tier's claims take at least a tenth of its ceiling (CLAIM_TIERS), so its generic plan
 * costs no more than their custom ones and is kept after five executions. Still an ordered walk
 * of task_claim_idx beside many small queues and a large one (claim.spec).
 * No ORDER BY outside: the rows come in the inner scan's order, and a sort there would pull, and
 * lock, all `ceiling` rows before the first is taken (claim.spec checks that a claim locks only
 * what it takes).
 */
function plainClaim(s: string, ceiling: number): string {
  return claimFrom(s, `
  SELECT p.id FROM (${firstDue(s, ceiling)}
  ) p
  LIMIT $2`, { rowsAs: 'arrays' });
}

/** The plain claim's statement for a claim of `limit` rows (see plainClaim). */
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
