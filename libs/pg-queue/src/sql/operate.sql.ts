import { debtsCte } from './dependencies.sql';
import { toldCte } from './watch.sql';
import { quoteIdent } from './identifiers';
import { notifyCte, marked } from './fragments.sql';
import { archiveInsert } from './task-fields';

/** Operator actions on single tasks or sets of tasks (cancel, retry, priority). */
export function operateStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    /**
     * Run first in cancel's transaction: locks task $1's row (waiting at most $2 ms: a business
     * transaction may hold it), so that cancel and a workflow's park serialise on the row. A park
     * under way is waited for, and the cancel statement then sees the task parked (and cancels it
     * at once); a park that comes after waits for the cancel, and then meets the row as cancel left
     * it: `woken`, so it goes back to pending, and its next attempt ends cancelled (journals in
     * workflow.sql.ts). Without the lock a cancel that read the task running could leave its request
     * to a workflow that parks meanwhile, for ever.
     */
    cancelLock: `
SELECT set_config('lock_timeout', $2, true) IS NULL AS bound, (SELECT state FROM ${s}.task WHERE id = $1::bigint FOR NO KEY UPDATE) AS state`,

    /**
     * Cancel. A pending, waiting (or dead) task moves to the archive as cancelled at once; its
     * dependants get debts (they end cancelled too, see dependencies.sql.ts). A running task
     * gets a cancel request (a row in task_cancel, which a transactional handler's row lock does not
     * block) and a notification `!cancel <id>` so its worker aborts the handler; whatever the
     * attempt's outcome, the task ends cancelled.
     * Parameters: $1 id, $2 channel. Returns cancelled / requested (0 or 1 each).
     */
    cancel: `
WITH now_cancelled AS (
  DELETE FROM ${s}.task WHERE id = $1::bigint AND state IN ('pending', 'waiting', 'dead', 'cancelled') RETURNING *
), archived AS (
  ${archiveInsert(s, 'c', { state: `'cancelled'`, finished_at: 'now()', result: 'NULL' })}
  FROM now_cancelled c
), ${debtsCte(s, "SELECT id, dependants, workflow_parents, 'cancelled' AS outcome, NULL::jsonb AS result FROM now_cancelled", '$2')},
${toldCte(s, "SELECT id, 'cancelled' AS state, queue, watched FROM now_cancelled", '$2')}, requested AS (
  INSERT INTO ${s}.task_cancel (task_id)
  SELECT id FROM ${s}.task WHERE id = $1::bigint AND state = 'running'
  ON CONFLICT DO NOTHING
  RETURNING task_id
), marked AS (
  -- A workflow parking now (see cancelLock) finds its row changed: its park goes pending, not
  -- waiting. SKIP LOCKED: this transaction holds the row after cancelLock; without it (the lock
  -- was not had in time) the cancel does not wait for the transaction that holds it.
  UPDATE ${s}.task t SET woken = true
  WHERE t.id = (SELECT w.id FROM ${s}.task w JOIN requested r ON r.task_id = w.id FOR UPDATE OF w SKIP LOCKED)
  RETURNING 1
), signalled AS (
  SELECT pg_notify($2, '!cancel ' || task_id) FROM requested
)
SELECT (SELECT count(*) FROM now_cancelled)::int AS cancelled,
       (SELECT count(*) FROM requested)::int AS requested,
       (SELECT count(*) FROM signalled)::int AS signalled, (SELECT count(*) FROM debts)::int AS debts,
       (SELECT count(*) FROM told)::int AS told`,

    /**
     * Retry tasks still in the hot table in one of the states $5 (dead, cancelled): back to pending,
     * attempts reset. A dependant (depends_on) comes back only with every parent's result in
     * parent_results, i.e. every parent ended done and told it so; one cancelled because a parent
     * ended dead or cancelled lacks that result (the parent's later end, after a retry, finds it
     * cancelled and is dropped), so it stays as it is and is listed in `refused` with the parents
     * whose results it lacks. Every retry path (retry, retryDead, the CLI, the dashboard) runs this
     * statement, so this is where a join is kept from running without its parents' results.
     * Parameters: $1 id[] or NULL, $2 queue or NULL, $3 ILIKE pattern on last_error or NULL, $4
     * channel, $5 states (text[]).
     */
    retry: `
WITH candidate AS (
  SELECT t.id,
         ARRAY (SELECT p.id FROM unnest(t.depends_on) AS p(id)
                WHERE coalesce(t.parent_results, '{}'::jsonb) -> p.id::text IS NULL ORDER BY p.id) AS lacking
  FROM ${s}.task t
  WHERE t.state = ANY ($5::text[])
    AND ($1::bigint[] IS NULL OR t.id = ANY ($1::bigint[]))
    AND ($2::text IS NULL OR t.queue = $2::text)
    AND ($3::text IS NULL OR t.last_error ILIKE $3::text)
), retried AS (
  UPDATE ${s}.task t
  SET state = 'pending', attempt = 0, run_at = now(), finished_at = NULL
  FROM candidate c
  WHERE t.id = c.id AND cardinality(c.lacking) = 0 AND t.state = ANY ($5::text[])
    -- a task of the same key enqueued since keeps its key: leave this one dead
    AND (t.dedup_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM ${s}.task k
      WHERE k.queue = t.queue AND k.dedup_key = t.dedup_key AND k.state IN ('pending', 'running')))
  RETURNING t.id, t.queue, t.run_at
), ${notifyCte('SELECT queue, run_at FROM retried', '$4')}
SELECT coalesce((SELECT array_agg(id::text) FROM retried), '{}') AS ids, (SELECT count(*) FROM notified)::int AS notified,
       coalesce((SELECT jsonb_agg(jsonb_build_object('id', id::text, 'parents', to_jsonb(lacking::text[]))) FROM candidate
                 WHERE cardinality(lacking) > 0), '[]') AS refused`,

    /**
     * Purge finished history: archived tasks (done, cancelled) and dead or cancelled tasks still in
     * the hot table, finished more than $3 ms ago, at most $4 rows of each table per call, oldest
     * first (by task_archive_finished_idx and task_dead_idx; run again until it deletes nothing).
     * Pending and running tasks are never touched. SKIP LOCKED: an operator's retry of the same
     * dead task wins. The archive's rows go one by one here, whatever partition holds them (the
     * pruner drops whole partitions); the age bound on the DELETE too spares the newer partitions
     * the id probes. Parameters: $1 queue (NULL: every queue), $2 states (text[] of done,
     * cancelled, dead), $3 age ms, $4 batch limit.
     */
    purge: `
WITH archived AS (
  DELETE FROM ${s}.task_archive
  WHERE finished_at < now() - $3 * interval '1 millisecond' AND id = ANY (ARRAY (
    SELECT id FROM ${s}.task_archive
    WHERE state = ANY ($2::text[]) AND finished_at < now() - $3 * interval '1 millisecond'
      AND ($1::text IS NULL OR queue = $1::text)
    ORDER BY finished_at LIMIT $4
  ))
  RETURNING 1
), live AS (
  DELETE FROM ${s}.task
  WHERE id = ANY (ARRAY (
    SELECT id FROM ${s}.task
    WHERE state IN ('dead', 'cancelled') AND state = ANY ($2::text[]) AND finished_at < now() - $3 * interval '1 millisecond'
      AND ($1::text IS NULL OR queue = $1::text)
    ORDER BY finished_at LIMIT $4
    FOR UPDATE SKIP LOCKED
  ))
  RETURNING 1
)
SELECT (SELECT count(*) FROM archived)::int AS archived, (SELECT count(*) FROM live)::int AS live`,

    /**
     * Run a pending task now: its run_at moves to now (never later: an overdue task keeps its
     * place), and the queue's workers are woken (the NOTIFY of new due work). Parameters: $1 id, $2 channel.
     */
    promote: changePending(s, 'run_at = least(t.run_at, now())', "g.state = 'pending'"),

    /**
     * Move a pending task's due time to $3 (timestamptz, as ISO text) or, with $3 NULL, to $4 ms
     * from now by the database's clock; the workers are woken, or their timers set, as for any
     * delayed task. Parameters: $1 id, $2 channel, $3 run_at, $4 delay ms.
     */
    reschedule: changePending(s, "run_at = coalesce($3::timestamptz, now() + $4::bigint * interval '1 millisecond')", "g.state = 'pending'"),

    /**
     * Replace the payload ($3, jsonb) of a task that has not started: pending, or waiting for
     * dependencies (not a parked workflow), and no workflow journal (a started workflow replays
     * its steps against its payload). Parameters: $1 id, $2 channel, $3 payload.
     */
    updatePayload: changePending(s, 'payload = $3::jsonb', `(g.state = 'pending' OR (g.state = 'waiting' AND g.waiting_for IS NULL)) AND NOT g.started`),

    /** Change a pending task's priority. Parameters: $1 id, $2 priority. */
    setPriority: `
UPDATE ${s}.task SET priority = $2 WHERE id = $1::bigint AND state = 'pending' RETURNING id::text AS id`,
  });
}

/**
 * A change to one task that has not run yet, fenced like setPriority and cancel: the statement
 * locks the task's row first (FOR NO KEY UPDATE; the caller bounds the wait with lock_timeout),
 * so a claim in flight either took the row before (the lock returns it running: refused) or
 * passes over it (claims SKIP LOCKED) and later claims the changed row: the changed task's queue
 * is woken (the NOTIFY of due work, or a timer for its due time), also because a worker that
 * passed over it may have gone idle. Returns `changed` (0 or 1), the state the lock found (NULL:
 * not in the hot table; the repository then looks for it in the archive with a fresh snapshot,
 * as a completion it waited for is not in this one), and whether it is parked or has started a
 * workflow (`started`). `allowed` is a condition on `g` (the locked row). $1 id, $2 channel.
 */
function changePending(s: string, set: string, allowed: string): string {
  return `
WITH g AS (
  SELECT t.id, t.state, t.waiting_for,
         EXISTS (SELECT 1 FROM ${s}.workflow_step j WHERE j.task_id = t.id) AS started
  FROM ${s}.task t WHERE t.id = $1::bigint
  FOR NO KEY UPDATE
), changed AS (
  UPDATE ${s}.task t SET ${set}
  FROM g WHERE t.id = g.id AND ${allowed}
  RETURNING t.queue, t.run_at, t.state
), ${notifyCte("SELECT queue, run_at FROM changed WHERE state = 'pending'", '$2')}
SELECT (SELECT count(*) FROM changed)::int AS changed, (SELECT state FROM g) AS state,
       (SELECT waiting_for IS NOT NULL FROM g) AS parked, (SELECT started FROM g) AS started,
       (SELECT count(*) FROM notified)::int AS notified`;
}
