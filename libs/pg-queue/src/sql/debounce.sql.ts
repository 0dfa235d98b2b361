import { quoteIdent } from './identifiers';
import { marked, notifyCte } from './fragments.sql';
import { DEBOUNCED_COLUMNS, debouncedValues, taskInput } from './task-fields';

/**
 * Debounce (the enqueue option): requests of one (queue, debounce key) fold into one run.
 *
 * Lock decisions:
 * - The burst waiting to run is the key's pending task that has never started: task_debounce_idx
 *   makes it unique, and a request folds into it with ON CONFLICT DO UPDATE (newest payload and tags, due
 *   `delayMs` from now but no later than its `debounce_until`). A claim that takes the task first
 *   sets started_at, which takes it out of that index: the request then waits only for the claim's
 *   statement and inserts a new burst. Nothing is counted in process memory, so any number of
 *   enqueuing instances agree.
 * - Leading mode needs to know whether the key's previous request was less than `delayMs` ago,
 *   also once its task has run and left the table: task_debounce keeps, per key, when the burst
 *   goes quiet. The upsert serialises concurrent requests of a key on that row (each waits for the
 *   previous one's commit), and prev_quiet_until hands back what the previous request set, so of
 *   two simultaneous first requests exactly one leads.
 *
 * Parameters: $1 the task row (JSON, one row as in enqueue.sql.ts; its run_at is ignored), $2
 * notify channel, $3 debounce key, $4 delay ms, $5 max delay ms (NULL: none), $6 leading.
 */
export function debounceStatements(schema: string) {
  const s = quoteIdent(schema);
  const ms = (p: string) => `${p}::bigint * interval '1 millisecond'`;
  return marked({
    debounce: `
WITH input AS (${taskInput(1)}
), gate AS (
  INSERT INTO ${s}.task_debounce AS d (queue, key, quiet_until)
  SELECT queue, $3, now() + ${ms('$4')} FROM input WHERE $6
  ON CONFLICT (queue, key) DO UPDATE SET quiet_until = EXCLUDED.quiet_until, prev_quiet_until = d.quiet_until
  RETURNING d.prev_quiet_until IS NULL OR d.prev_quiet_until <= now() AS leads
), lead AS (
  INSERT INTO ${s}.task (${DEBOUNCED_COLUMNS})
  SELECT ${debouncedValues('now()')} FROM input
  WHERE coalesce((SELECT leads FROM gate), false)
  RETURNING id, queue, run_at, true AS created
), trail AS (
  INSERT INTO ${s}.task AS task (${DEBOUNCED_COLUMNS}, debounce_key, debounce_until)
  SELECT ${debouncedValues(`now() + ${ms('$4')}`)},
         $3, CASE WHEN $5::bigint IS NULL THEN 'infinity' ELSE now() + ${ms('$5')} END
  FROM input
  WHERE NOT coalesce((SELECT leads FROM gate), false)
  ON CONFLICT (queue, debounce_key) WHERE debounce_key IS NOT NULL AND state = 'pending' AND started_at IS NULL
  DO UPDATE SET payload = EXCLUDED.payload, priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts,
                trace_context = EXCLUDED.trace_context, tags = EXCLUDED.tags, run_at = least(EXCLUDED.run_at, task.debounce_until)
  RETURNING id, queue, run_at, (xmax = 0) AS created
), ${notifyCte('SELECT queue, run_at FROM lead UNION ALL SELECT queue, run_at FROM trail', '$2')}
SELECT coalesce((SELECT id FROM lead), (SELECT id FROM trail))::text AS id,
       (SELECT count(*) FROM notified)::int AS notified`,
  });
}
