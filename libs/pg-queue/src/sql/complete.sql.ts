import { backOffScopeCtes } from './backoff.sql';
import { debtsCte } from './dependencies.sql';
import { toldCte } from './watch.sql';
import { quoteIdent } from './identifiers';
import { appendedLog, failureEntry } from './task-report.sql';
import { ATTEMPT_LIMIT, HELD, LEASE_COUNT, TOKEN_HELD, idList, ON_LIVE_KEY, cancelRequestedOf, notifyCte, marked, rowLockBound } from './fragments.sql';
import { archiveInsert, ENQUEUED_COLUMNS, taskInput } from './task-fields';

/**
 * Finishing attempts. Every statement is fenced by the lease token: a worker whose lease was lost
 * matches no row and changes nothing. Rows are found as `id = ANY(ids)` with the token in the
 * hashed set of $2 (HELD; $1 and $2 are comma-separated lists): an index scan of the primary key
 * whatever the statistics say, where a join against unnest() lets a generic plan pick a nested loop
 * that compares every lease with every running row. Tokens are random per claim, so a row's
 * current token is in $2 only if the caller holds that very lease, provided one statement never
 * carries two leases of the same task: the repository sees to that, and then results can name
 * leases by task id.
 * Each takes a whole batch, so a batch finishes in one round trip. A pending cancel request
 * (task_cancel) turns any outcome into `cancelled`.
 * `rowLockWaitMs`: for statements run outside a transaction (lease mode), how long each waits for
 * a row lock (rowLockBound); null inside one (a transactional batch), whose own bounds apply.
 */
export type FinishedRetention = 'archive' | 'delete';

export function completeStatements(schema: string, retention: FinishedRetention, rowLockWaitMs: number | null = null) {
  const s = quoteIdent(schema);
  const bound = rowLockBound(rowLockWaitMs);
  // The archive keeps when each handler really started and ended: $5 and $6 say how many ms before
  // this statement, per lease in $1's order (measured on the worker's monotonic clock, so neither
  // the transaction's start, which now() would give, nor clock skew distorts run times). They are
  // comma-separated text like $1: as arrays, Prisma's driver stack spends CPU on every element.
  // The handlers' return values: a JSON object by task id, the last parameter.
  const results = retention === 'archive' ? '$7' : '$5';
  const keepHistory = retention === 'archive'
    ? `, archived AS (
  ${archiveInsert(s, 'd', {
    state: `CASE WHEN d.cancelled THEN 'cancelled' ELSE 'done' END`,
    started_at: `coalesce(clock_timestamp() - r.started_ago * interval '1 millisecond', d.started_at)`,
    finished_at: `coalesce(clock_timestamp() - r.finished_ago * interval '1 millisecond', clock_timestamp())`,
    result: `CASE WHEN NOT d.cancelled THEN ${results}::jsonb -> d.id::text END`,
  })}
  FROM done d
  LEFT JOIN unnest(string_to_array($1, ',')::bigint[], string_to_array($5, ',')::float8[], string_to_array($6, ',')::float8[])
    AS r(id, started_ago, finished_ago) ON r.id = d.id
)`
    : '';
  const cancelRequested = cancelRequestedOf(s);
  /**
   * Element of a per-lease input array ($n) for row `t`: looked up by its token's position in $2,
   * from a map the lease_pos CTE builds once (array_position would scan $2 for every row).
   */
  const perLease = (n: number, type: string) => `($${n}::${type}[])[((SELECT pos FROM lease_pos) ->> t.lease_token::text)::int]`;
  /** Gives leases back uncounted, due at `runAt` (null: as they were); `ctes` may read `released`. */
  const releasing = (runAt: string | null, ctes = '') => `
WITH released AS (
  UPDATE ${s}.task t
  SET state = CASE WHEN ${cancelRequested} THEN 'cancelled' ELSE 'pending' END,
      attempt = greatest(t.attempt - 1, 0),${runAt === null ? '' : ` run_at = CASE WHEN ${cancelRequested} THEN t.run_at ELSE ${runAt} END,`}
      locked_by = NULL, lease_token = NULL, locked_until = NULL
  WHERE ${HELD}${bound}
  RETURNING t.id, t.queue, t.partition_key, t.state, t.run_at, t.dependants, t.workflow_parents, t.watched
), ${ctes ? `${ctes}, ` : ''}uncancel AS (
  DELETE FROM ${s}.task_cancel c USING released r WHERE c.task_id = r.id AND r.state = 'cancelled'
), ${debtsCte(s, "SELECT id, dependants, workflow_parents, state AS outcome, NULL::jsonb AS result FROM released WHERE state = 'cancelled'", '$3')},
${toldCte(s, "SELECT id, state, queue, watched FROM released WHERE state = 'cancelled'", '$3')},
${notifyCte("SELECT queue, run_at FROM released WHERE state = 'pending'", '$3')}
SELECT (SELECT ${idList('id')} FROM released) AS released_ids,
       (SELECT ${idList('id')} FROM released WHERE state = 'cancelled') AS cancelled_ids,
       (SELECT count(*) FROM notified)::int AS notified, (SELECT count(*) FROM debts)::int AS debts,
       (SELECT count(*) FROM told)::int AS told`;
  return marked({
    /**
     * Success. A task re-enqueued with onConflict 'rerun' while it ran goes back to pending with
     * its newest payload; the rest leave the hot table (archived or deleted). Follow-ups are
     * inserted in the same statement, only for parents whose fence held, so they commit exactly
     * when their parent's completion does.
     * Parameters: $1 ids, $2 lease tokens (see HELD), $3 follow-ups (JSON rows as in enqueue), $4 channel;
     * with the archive, $5 and $6 the handlers' start and end as ms before now, in $1's order;
     * last ($7, or $5 without the archive), the handlers' results as a JSON object by id.
     * A finished task's dependants get debts (see dependencies.sql.ts).
     * A lease in none of the three result lists either was lost or raced a concurrent rerun
     * request (possible in both modes: a transactional handler's FOR KEY SHARE lets the request
     * in); the repository sends those once more.
     */
    complete: `
WITH done AS (
  DELETE FROM ${s}.task t
  WHERE ${HELD} AND (t.rerun_payload IS NULL OR ${cancelRequested})${bound}
  RETURNING t.*, ${cancelRequested} AS cancelled
), rerun AS (
  -- Only the leases not finished above are looked up again: almost always none. The count check
  -- is a one-time filter that skips the lookup, and the set difference it needs, when every lease
  -- was finished (a lease is a task, at most once per statement).
  UPDATE ${s}.task t
  SET state = 'pending', payload = t.rerun_payload, rerun_payload = NULL, attempt = 0, run_at = now(),
      locked_by = NULL, lease_token = NULL, locked_until = NULL, last_error = NULL, finished_at = now(), progress = NULL
  WHERE (SELECT count(*) FROM done) < ${LEASE_COUNT}
    AND t.id = ANY (ARRAY (SELECT unnest(string_to_array($1, ',')::bigint[]) EXCEPT ALL SELECT id FROM done))
    AND ${TOKEN_HELD}
    AND t.rerun_payload IS NOT NULL AND NOT ${cancelRequested}${bound}
  RETURNING t.id, t.queue, t.run_at
)${keepHistory}, uncancel AS (
  DELETE FROM ${s}.task_cancel c USING done d WHERE c.task_id = d.id AND d.cancelled
), follow_ups AS (
  INSERT INTO ${s}.task (${ENQUEUED_COLUMNS})
  SELECT ${ENQUEUED_COLUMNS} FROM (${taskInput(3)}) f
  WHERE f.parent_id IN (SELECT id FROM done WHERE NOT cancelled UNION ALL SELECT id FROM rerun)
  ORDER BY f.ord
  ${ON_LIVE_KEY} DO NOTHING
  RETURNING queue, run_at
), ${debtsCte(s, `SELECT id, dependants, workflow_parents, CASE WHEN cancelled THEN 'cancelled' ELSE 'done' END AS outcome,
         CASE WHEN NOT cancelled THEN ${results}::jsonb -> id::text END AS result FROM done`, '$4')},
${toldCte(s, "SELECT id, CASE WHEN cancelled THEN 'cancelled' ELSE 'done' END AS state, queue, watched FROM done", '$4')},
${notifyCte('SELECT queue, run_at FROM follow_ups UNION ALL SELECT queue, run_at FROM rerun', '$4')}
SELECT (SELECT ${idList('id')} FROM done WHERE NOT cancelled) AS done_ids,
       (SELECT ${idList('id')} FROM done WHERE cancelled) AS cancelled_ids,
       (SELECT ${idList('id')} FROM rerun) AS rerun_ids,
       (SELECT count(*) FROM notified)::int AS notified, (SELECT count(*) FROM debts)::int AS debts,
       (SELECT count(*) FROM told)::int AS told`,

    /**
     * Failure: retry at now + delay, or `dead` when the error is fatal or attempts are used up. A
     * newer payload from a rerun request supersedes the failed run: it starts over with that one.
     * A retry is announced like a delayed task (its due time in the NOTIFY), so any idle worker,
     * not only this one, sets its timer for it.
     * With $7 false (retryBlocksGroup: false) a task of a group that will be retried moves to the
     * back of its group: the tasks waiting behind it go first (see task_group_pos_idx).
     * Each failed attempt appends its error and run time to the task's log (task-report.sql.ts).
     * Parameters: $1 ids, $2 lease tokens (see HELD), $3 error[] (already truncated), $4 delay_ms[], $5 fatal[],
     * $8 ran_ms[] (NULL: unknown), in the order of $2; $6 channel; $7 a retry keeps its place in its group.
     */
    fail: `
WITH lease_pos AS (
  SELECT jsonb_object_agg(token::uuid::text, ord) AS pos
  FROM unnest(string_to_array($2, ',')) WITH ORDINALITY AS l(token, ord)
), failed AS (
  UPDATE ${s}.task t
  SET state = CASE WHEN ${cancelRequested} THEN 'cancelled'
                   WHEN t.rerun_payload IS NOT NULL THEN 'pending'
                   WHEN ${perLease(5, 'boolean')} OR t.attempt >= ${ATTEMPT_LIMIT} THEN 'dead'
                   ELSE 'pending' END,
      run_at = CASE WHEN ${cancelRequested} OR t.rerun_payload IS NOT NULL THEN now()
                    WHEN ${perLease(5, 'boolean')} OR t.attempt >= ${ATTEMPT_LIMIT} THEN t.run_at
                    ELSE now() + ${perLease(4, 'bigint')} * interval '1 millisecond' END,
      payload = coalesce(t.rerun_payload, t.payload),
      attempt = CASE WHEN t.rerun_payload IS NOT NULL AND NOT ${cancelRequested} THEN 0 ELSE t.attempt END,
      rerun_payload = NULL,
      group_pos = CASE WHEN NOT $7 AND t.group_key IS NOT NULL AND t.rerun_payload IS NULL AND NOT ${cancelRequested}
                            AND NOT ${perLease(5, 'boolean')} AND t.attempt < ${ATTEMPT_LIMIT}
                       THEN nextval(pg_get_serial_sequence('${s}.task', 'id')) ELSE t.group_pos END,
      last_error = ${perLease(3, 'text')},
      log = ${appendedLog('t.log', failureEntry(perLease(3, 'text'), perLease(8, 'bigint')))},
      locked_by = NULL, lease_token = NULL, locked_until = NULL,
      finished_at = now()
  WHERE ${HELD}${bound}
  RETURNING t.id, t.state, t.queue, t.run_at, t.dependants, t.workflow_parents, t.watched
), uncancel AS (
  DELETE FROM ${s}.task_cancel c USING failed f WHERE c.task_id = f.id AND f.state = 'cancelled'
), ${debtsCte(s, "SELECT id, dependants, workflow_parents, state AS outcome, NULL::jsonb AS result FROM failed WHERE state IN ('dead', 'cancelled')", '$6')},
${toldCte(s, 'SELECT id, state, queue, watched FROM failed', '$6')},
${notifyCte("SELECT queue, run_at FROM failed WHERE state = 'pending'", '$6')}
SELECT id::text AS id, state, (SELECT count(*) FROM notified)::int AS notified, (SELECT count(*) FROM debts)::int AS debts,
       (SELECT count(*) FROM told)::int AS told FROM failed`,

    /**
     * Shutdown: give unfinished tasks back without counting the attempt (or cancel them if asked).
     * Parameters: $1 ids, $2 lease tokens (see HELD), $3 channel.
     */
    release: releasing(null),

    /**
     * Back-offs (backoff.sql.ts): each lease goes back like a release (no attempt counted, no
     * error recorded), due at its end (epoch ms, the database's clock as the worker estimates it),
     * and its scope is recorded from the rows given back, so a stale attempt sets nothing. A batch
     * in one statement: a burst of 429s ends many attempts at once.
     * Parameters: as release, $4 the back-offs by task id (JSON object, see backOffsJson).
     */
    backOff: releasing(`to_timestamp((($4::jsonb -> t.id::text) ->> 'untilMs')::float8 / 1000)`, backOffScopeCtes(s)),

    /**
     * An attempt with follow-ups that have dependencies inside a caller's transaction
     * (transactional mode; outside one it gets its own, see inBoundedTransaction): a savepoint,
     * so a failure undoes this attempt's completion and follow-ups and nothing else.
     */
    followUpsSavepoint: 'SAVEPOINT pgqueue_follow_ups',
    followUpsRollback: 'ROLLBACK TO SAVEPOINT pgqueue_follow_ups',
    followUpsRelease: 'RELEASE SAVEPOINT pgqueue_follow_ups',

    /**
     * Lease mode: extend the leases still held, and report cancel requests (the fallback when the
     * `!cancel` notification was missed). A row locked by another transaction is skipped, not
     * waited for (one wait would delay every lease of the statement past its end), and reported
     * `busy`: held as far as this snapshot knows, extended by a later heartbeat. Only a business
     * transaction holds a running task's row for long (see rowLockBound), and while it does, no
     * claim or rescue (FOR UPDATE SKIP LOCKED) can take the task over.
     * Parameters: $1 ids, $2 lease tokens (see HELD), $3 lease ms.
     */
    heartbeat: `
WITH free AS (
  SELECT t.id FROM ${s}.task t WHERE ${HELD} FOR NO KEY UPDATE OF t SKIP LOCKED
), extended AS (
  UPDATE ${s}.task t
  SET locked_until = now() + $3 * interval '1 millisecond'
  FROM free WHERE t.id = free.id
  RETURNING t.id, ${cancelRequested} AS cancelled
)
SELECT id::text AS id, cancelled, false AS busy FROM extended
UNION ALL
SELECT t.id::text, ${cancelRequested}, true FROM ${s}.task t WHERE ${HELD} AND t.id NOT IN (SELECT id FROM free)`,
  });
}
