import { debtsCte } from './dependencies.sql';
import { toldCte } from './watch.sql';
import { quoteIdent } from './identifiers';
import { notifyCte, marked } from './fragments.sql';

/** Operator actions on single tasks or sets of tasks (cancel, retry, priority). */
export function operateStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
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
  INSERT INTO ${s}.task_archive (id, queue, state, payload, priority, run_at, attempt, max_attempts,
                                 last_error, parent_id, dedup_key, group_key, created_at, started_at, finished_at,
                                 trace_context, partition_key, depends_on, dependants)
  SELECT id, queue, 'cancelled', payload, priority, run_at, attempt, coalesce(max_attempts, attempt_limit),
         last_error, parent_id, dedup_key, group_key, created_at, started_at, now(), trace_context, partition_key, depends_on, dependants
  FROM now_cancelled
), ${debtsCte(s, "SELECT id, dependants, 'cancelled' AS outcome, NULL::jsonb AS result FROM now_cancelled", '$2')},
${toldCte(s, "SELECT id, 'cancelled' AS state, queue, watched FROM now_cancelled", '$2')}, requested AS (
  INSERT INTO ${s}.task_cancel (task_id)
  SELECT id FROM ${s}.task WHERE id = $1::bigint AND state = 'running'
  ON CONFLICT DO NOTHING
  RETURNING task_id
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

    /** Change a pending task's priority. Parameters: $1 id, $2 priority. */
    setPriority: `
UPDATE ${s}.task SET priority = $2 WHERE id = $1::bigint AND state = 'pending' RETURNING id::text AS id`,
  });
}
