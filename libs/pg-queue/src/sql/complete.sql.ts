import { quoteIdent } from './identifiers';

/**
 * Finishing attempts. Every statement is fenced by (id, lease_token): a worker whose lease was lost
 * matches no row and changes nothing. All take arrays, so a batch of tasks finishes in one round trip.
 */
export type FinishedRetention = 'archive' | 'delete';

export function completeStatements(schema: string, retention: FinishedRetention) {
  const s = quoteIdent(schema);
  const keepHistory = retention === 'archive'
    ? `, archived AS (
  INSERT INTO ${s}.task_archive (id, queue, state, payload, priority, run_at, attempt, max_attempts,
                                 last_error, parent_id, created_at, started_at, finished_at)
  SELECT id, queue, 'done', payload, priority, run_at, attempt, max_attempts,
         last_error, parent_id, created_at, started_at, now()
  FROM done
)`
    : '';
  return {
    /**
     * Success: the finished rows leave the hot table (archived or deleted) and their follow-up
     * tasks are inserted in the same statement, only for parents whose fence held, so follow-ups
     * commit exactly when their parent's completion does.
     * Parameters: $1 id[], $2 lease_token[]; follow-ups as in insertMany: $3 queue[], $4 payload[],
     * $5 priority[], $6 run_at[], $7 delay_ms[], $8 max_attempts[], $9 parent_id[]; $10 channel.
     */
    complete: `
WITH done AS (
  DELETE FROM ${s}.task t
  USING unnest($1::bigint[], $2::uuid[]) AS l(id, token)
  WHERE t.id = l.id AND t.lease_token = l.token AND t.state = 'running'
  RETURNING t.*
)${keepHistory}, follow_ups AS (
  INSERT INTO ${s}.task (queue, payload, priority, run_at, max_attempts, parent_id)
  SELECT f.queue, f.payload, f.priority,
         coalesce(f.run_at, now() + f.delay_ms * interval '1 millisecond'),
         f.max_attempts, f.parent_id
  FROM unnest($3::text[], $4::jsonb[], $5::int[], $6::timestamptz[], $7::bigint[], $8::int[], $9::bigint[])
    AS f(queue, payload, priority, run_at, delay_ms, max_attempts, parent_id)
  WHERE f.parent_id IN (SELECT id FROM done)
  RETURNING queue
), notified AS (
  SELECT pg_notify($10, queue) FROM (SELECT DISTINCT queue FROM follow_ups) q
)
SELECT coalesce((SELECT array_agg(id::text) FROM done), '{}') AS done_ids,
       (SELECT count(*) FROM notified)::int AS notified`,

    /**
     * Failure: retry at now + delay, or `dead` when the error is fatal or attempts are used up.
     * Parameters: $1 id[], $2 lease_token[], $3 error[] (already truncated), $4 delay_ms[], $5 fatal[].
     */
    fail: `
UPDATE ${s}.task t
SET state = CASE WHEN f.fatal OR t.attempt >= t.max_attempts THEN 'dead' ELSE 'pending' END,
    run_at = CASE WHEN f.fatal OR t.attempt >= t.max_attempts THEN t.run_at
                  ELSE now() + f.delay_ms * interval '1 millisecond' END,
    last_error = f.error,
    locked_by = NULL, lease_token = NULL, locked_until = NULL,
    finished_at = now()
FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::bigint[], $5::boolean[]) AS f(id, token, error, delay_ms, fatal)
WHERE t.id = f.id AND t.lease_token = f.token AND t.state = 'running'
RETURNING t.id::text AS id, t.state`,

    /**
     * Shutdown: give unfinished tasks back without counting the attempt.
     * Parameters: $1 id[], $2 lease_token[], $3 channel.
     */
    release: `
WITH released AS (
  UPDATE ${s}.task t
  SET state = 'pending', attempt = greatest(t.attempt - 1, 0),
      locked_by = NULL, lease_token = NULL, locked_until = NULL
  FROM unnest($1::bigint[], $2::uuid[]) AS l(id, token)
  WHERE t.id = l.id AND t.lease_token = l.token AND t.state = 'running'
  RETURNING t.id, t.queue
), notified AS (
  SELECT pg_notify($3, queue) FROM (SELECT DISTINCT queue FROM released) q
)
SELECT coalesce((SELECT array_agg(id::text) FROM released), '{}') AS released_ids,
       (SELECT count(*) FROM notified)::int AS notified`,

    /**
     * Lease mode: extend the leases still held. Parameters: $1 id[], $2 lease_token[], $3 lease ms.
     */
    heartbeat: `
UPDATE ${s}.task t
SET locked_until = now() + $3 * interval '1 millisecond'
FROM unnest($1::bigint[], $2::uuid[]) AS l(id, token)
WHERE t.id = l.id AND t.lease_token = l.token AND t.state = 'running'
RETURNING t.id::text AS id`,
  };
}
