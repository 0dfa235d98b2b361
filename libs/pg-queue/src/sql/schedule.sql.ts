import { marked } from './fragments.sql';
import { quoteIdent } from './identifiers';

/** Schedules declared in code, persisted so that every instance agrees on the next tick. */
export function scheduleStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    /**
     * Declare or update a schedule. The next tick is kept unless the timing itself changed.
     * Parameters: $1 name, $2 queue, $3 cron, $4 every_ms, $5 tz, $6 payload, $7 missed, $8 first tick.
     */
    upsert: `
INSERT INTO ${s}.schedule AS sc (name, queue, cron, every_ms, tz, payload, missed, next_run_at)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8)
ON CONFLICT (name) DO UPDATE SET
  queue = EXCLUDED.queue, payload = EXCLUDED.payload, missed = EXCLUDED.missed,
  cron = EXCLUDED.cron, every_ms = EXCLUDED.every_ms, tz = EXCLUDED.tz,
  next_run_at = CASE WHEN sc.cron IS NOT DISTINCT FROM EXCLUDED.cron
                      AND sc.every_ms IS NOT DISTINCT FROM EXCLUDED.every_ms
                      AND sc.tz IS NOT DISTINCT FROM EXCLUDED.tz
                     THEN sc.next_run_at ELSE EXCLUDED.next_run_at END,
  updated_at = now()`,

    /** Retire schedules of the given queues that the code no longer declares. $1 queue[], $2 kept name[]. */
    retire: `
DELETE FROM ${s}.schedule WHERE queue = ANY ($1::text[]) AND NOT (name = ANY ($2::text[])) RETURNING name`,

    /**
     * Due schedules, locked for this transaction: another instance skips them, so a tick is
     * enqueued once. Returns the database clock too, the only clock ticks are judged by.
     */
    lockDue: `
SELECT name, queue, cron, every_ms::float8 AS every_ms, tz, payload, missed, next_run_at, now() AS db_now
FROM ${s}.schedule WHERE next_run_at <= now()
ORDER BY next_run_at LIMIT 50
FOR UPDATE SKIP LOCKED`,

    /** $1 name, $2 next tick, $3 last tick fired (or NULL). */
    advance: `
UPDATE ${s}.schedule SET next_run_at = $2, last_run_at = coalesce($3, last_run_at) WHERE name = $1`,

    /** Milliseconds until the earliest tick (NULL without schedules). */
    untilNext: `
SELECT (extract(epoch FROM min(next_run_at) - now()) * 1000)::float8 AS ms FROM ${s}.schedule`,
  });
}
