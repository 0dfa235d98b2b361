import { quoteIdent } from './identifiers';

/**
 * Housekeeping that any instance may run at any time; SKIP LOCKED keeps instances (and live
 * transactional handlers, which hold their rows locked) out of each other's way.
 */
export function maintainStatements(schema: string) {
  const s = quoteIdent(schema);
  return {
    /**
     * Hung-task recovery: running tasks whose lease ran out go back to pending, or to dead when the
     * lost attempt was the last one (a task that kills its worker every time cannot loop forever).
     * A transactional handler still inside its transaction holds the row lock and is skipped.
     * Parameters: $1 batch limit, $2 channel.
     */
    rescueExpired: `
WITH expired AS (
  SELECT id FROM ${s}.task
  WHERE state = 'running' AND locked_until < now()
  ORDER BY locked_until
  LIMIT $1
  FOR UPDATE SKIP LOCKED
), rescued AS (
  UPDATE ${s}.task t
  SET state = CASE WHEN t.attempt >= t.max_attempts THEN 'dead' ELSE 'pending' END,
      last_error = 'lease expired: worker ' || coalesce(t.locked_by, '?') || ' did not finish attempt ' || t.attempt,
      locked_by = NULL, lease_token = NULL, locked_until = NULL,
      run_at = now(), finished_at = now()
  FROM expired
  WHERE t.id = expired.id
  RETURNING t.id, t.queue, t.state
), notified AS (
  SELECT pg_notify($2, queue) FROM (SELECT DISTINCT queue FROM rescued WHERE state = 'pending') q
)
SELECT count(*)::int AS rescued,
       count(*) FILTER (WHERE state = 'dead')::int AS dead,
       (SELECT count(*) FROM notified)::int AS notified
FROM rescued`,
  };
}
