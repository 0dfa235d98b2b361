import { marked } from './fragments.sql';
import { quoteIdent } from './identifiers';
import { windowAdd, windowCount, windowFreesInMs } from './rate-window.sql';

/** First key of the advisory lock that serialises the claims of a named limiter's queues; the second is hashtext(schema.limiter). */
export const LIMITER_LOCK_NAMESPACE = 0x70_67_6e; // "pgn"

/**
 * Named limiters (module option `limiters`, handler option `limiter`): one concurrency and rate
 * budget, and one back-off, shared by every queue that names the limiter, across every instance.
 *
 * Lock decision: a claim of such a queue is a limited claim (claim_limited, limits.sql.ts): it
 * first takes the queue's lock, then the limiter's (always in that order, so two claims never wait
 * for each other in a cycle), under the bounds it set (lock_timeout). Every statement after the
 * lock counts with a fresh snapshot
 * (READ COMMITTED), so no two claims of the limiter's queues count the same free slot, as for a
 * queue's own limits.
 *
 * Counting: a limiter's running tasks are those of every queue registered as using it
 * (limiter_queue, written by each instance at its start), including queues this instance does
 * not handle; its rate window is a row of limiter_state (rate-window.sql.ts).
 */
export function limiterStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    /**
     * What the limiter's budget leaves, read under its lock by clock_timestamp() (as `room` in
     * limits.sql.ts): running tasks of its queues (task_running_idx), claims in its rate window and
     * when the oldest leaves it. Parameters: $1 limiter, $2 window ms (0: no rate limit).
     */
    room: `
WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now)
SELECT (SELECT count(*) FROM ${s}.task t
        WHERE t.state = 'running' AND t.queue IN (SELECT lq.queue FROM ${s}.limiter_queue lq WHERE lq.limiter = $1))::int AS running,
       ${windowCount('l.rate_at', 'l.rate_n', '$2', 'c.now')} AS window_count,
       ${windowFreesInMs('l.rate_at', 'l.rate_n', '$2', 'c.now')} AS window_frees_in_ms
FROM c LEFT JOIN ${s}.limiter_state l ON l.name = $1`,

    /** After a claim that started $3 tasks: the limiter's window records them. Parameters: $1 limiter, $2 window ms. */
    record: `
INSERT INTO ${s}.limiter_state AS l (name, rate_at, rate_n)
VALUES ($1, ARRAY[clock_timestamp()], ARRAY[$3::int])
ON CONFLICT (name) DO UPDATE
SET (rate_at, rate_n) = ${windowAdd('l.rate_at', 'l.rate_n', '$2', '$3::int', 'clock_timestamp()')}`,

    /**
     * At an instance's start: the queues it handles ($1) use the limiters $2 ('' for none, in $1's
     * order). A queue's rows for any other limiter go (its settings changed); waits only for
     * another instance's same statement (autocommit, milliseconds), bounded by lock_timeout. Rows
     * are written in key order whatever order $1 lists them in: two instances registering the same
     * queues then take their locks in the same order and never deadlock.
     */
    register: `
WITH bound AS MATERIALIZED (SELECT set_config('lock_timeout', '2s', true)),
given AS (SELECT q, l FROM unnest($1::text[], $2::text[]) AS x(q, l), bound),
gone AS (
  DELETE FROM ${s}.limiter_queue lq USING given g WHERE lq.queue = g.q AND lq.limiter <> g.l
)
INSERT INTO ${s}.limiter_queue (limiter, queue)
SELECT l, q FROM given WHERE l <> '' ORDER BY l, q
ON CONFLICT (limiter, queue) DO UPDATE SET seen_at = now()`,

    /**
     * Each limiter's budget in use now, for the dashboard and metrics: running tasks, claims in its
     * window, and when its back-off ends (NULL: none). Parameters: $1 names, $2 window ms each.
     */
    budgets: `
SELECT x.name,
       (SELECT count(*) FROM ${s}.task t
        WHERE t.state = 'running' AND t.queue IN (SELECT lq.queue FROM ${s}.limiter_queue lq WHERE lq.limiter = x.name))::int AS running,
       coalesce((SELECT ${windowCount('l.rate_at', 'l.rate_n', 'x.ms', 'clock_timestamp()')} FROM ${s}.limiter_state l WHERE l.name = x.name), 0) AS window_count,
       (SELECT max(b.until) FROM ${s}.backoff b WHERE b.name = x.name AND b.scope = 'limiter' AND b.until > now()) AS backed_off_until
FROM unnest($1::text[], $2::bigint[]) AS x(name, ms)
ORDER BY x.name`,
  });
}
