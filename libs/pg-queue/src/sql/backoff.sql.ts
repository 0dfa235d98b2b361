import { marked } from './fragments.sql';
import { quoteIdent } from './identifiers';

/**
 * Back-offs a handler asked for (RateLimitedError / ctx.backOff): its task goes back to `pending`,
 * due after the delay, with no attempt counted and nothing recorded as a failure; and with a scope
 * wider than the task, a row of `backoff` (migration 23) keeps the scope from being claimed by any
 * instance until it ends: the queue, the task's partition, or a named limiter.
 *
 * Fencing: the row is inserted by the statement that gives the lease back (`backOff` in
 * complete.sql.ts), from the rows that statement changed: a stale attempt (lease lost) matches no
 * row and sets nothing. Rows are only inserted, never updated: two back-offs of one scope never
 * wait for each other's row lock; the one that ends last wins. Expired rows are deleted by later
 * back-offs (SKIP LOCKED, a few at a time).
 *
 * How claims honour them (no notice needed: the claim statements themselves read the table, see
 * claim.sql.ts):
 * - `claimable`: one probe of backoff_scope_idx per claim, an initplan the planner makes a
 *   one-time filter ("has this queue a back-off in force?"); only when it has does the queue-wide
 *   check run, and the per-row partition check for rows with a partition.
 * - the partitioned claim gives a backed-off partition no room, and a limited claim reads the
 *   queue's and its limiter's back-off first (`room` in limits.sql.ts).
 * - a claim that comes back short says when the next back-off of its queue ends, like a delayed
 *   task's due time, so the workers wake on time without polling.
 */

/** Scopes of a back-off kept in the table ('task' keeps none: only the task's due time moves). */
export type BackOffScope = 'queue' | 'partition' | 'limiter';

/** Queue `queue` (an expression) is backed off as a whole, or through its limiter (limiter_queue): for the health check. */
export const queueBackedOff = (s: string, queue: string) =>
  `EXISTS (SELECT 1 FROM ${s}.backoff b WHERE b.until > now() AND ((b.name = ${queue} AND b.scope = 'queue')
           OR (b.scope = 'limiter' AND b.name IN (SELECT lq.limiter FROM ${s}.limiter_queue lq WHERE lq.queue = ${queue}))))`;

/**
 * The CTE `scoped` that records a back-off's scope for the leases `released` gave back (columns
 * id, queue, partition_key), and `expired` that deletes a few ended rows.
 * Parameters: $4 the back-offs by task id (backOffsJson: its end, scope 'task', 'queue',
 * 'partition' or 'limiter', the limiter's name, the reason).
 */
export function backOffScopeCtes(s: string): string {
  return `scoped AS (
  INSERT INTO ${s}.backoff (scope, name, partition_key, until, task_id, reason)
  SELECT b.scope, CASE WHEN b.scope = 'limiter' THEN b.limiter ELSE r.queue END,
         CASE WHEN b.scope = 'partition' THEN coalesce(r.partition_key, '') ELSE '' END, to_timestamp(b."untilMs" / 1000), r.id, b.reason
  FROM released r CROSS JOIN LATERAL jsonb_to_record($4::jsonb -> r.id::text) AS b(scope text, limiter text, reason text, "untilMs" float8)
  -- Also for a task that ended cancelled (its cancel was requested while it ran): the downstream's
  -- 429 holds for its scope whatever became of the task that heard it.
  WHERE b.scope <> 'task'
  RETURNING 1
), expired AS (
  DELETE FROM ${s}.backoff WHERE id IN (
    SELECT id FROM ${s}.backoff WHERE until < now() - interval '1 minute' LIMIT 100 FOR UPDATE SKIP LOCKED)
)`;
}

export function backOffStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    /** The back-offs in force, the latest end per scope first by name. */
    list: `
SELECT scope, name, partition_key, max(until) AS until, (array_agg(reason ORDER BY until DESC))[1] AS reason
FROM ${s}.backoff WHERE until > now()
GROUP BY scope, name, partition_key
ORDER BY name, scope, partition_key`,
  });
}
