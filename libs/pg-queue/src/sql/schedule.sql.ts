import { marked } from './fragments.sql';
import { quoteIdent } from './identifiers';

/** A schedule was created or changed at run time (see WakeupListener): tickers look again now. */
export const SCHEDULES_NOTICE = '!schedules';

/**
 * Schedules declared in code and created at run time (column `origin`, migration 21), persisted so
 * that every instance agrees on the next tick. Both kinds tick by the same pass (lockDue/advance).
 */
export function scheduleStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    /**
     * Declare (origin 'code') or create / change (origin 'runtime') a schedule. The next tick is
     * kept unless the timing itself changed. A row of the other origin is left as it is: no row
     * comes back (`created` NULL), which the caller turns into ScheduleNameTakenError. When $10 (the
     * channel) is given, a write is announced at commit (`!schedules`): the tickers of running
     * instances recompute their sleep at once instead of after up to 30 s.
     * Parameters: $1 name, $2 queue, $3 cron, $4 every_ms, $5 tz, $6 payload, $7 missed, $8 first tick,
     * $9 origin, $10 channel or NULL.
     */
    upsert: `
WITH written AS (
  INSERT INTO ${s}.schedule AS sc (name, queue, cron, every_ms, tz, payload, missed, next_run_at, origin)
  VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9)
  ON CONFLICT (name) DO UPDATE SET
    queue = EXCLUDED.queue, payload = EXCLUDED.payload, missed = EXCLUDED.missed,
    cron = EXCLUDED.cron, every_ms = EXCLUDED.every_ms, tz = EXCLUDED.tz,
    next_run_at = CASE WHEN sc.cron IS NOT DISTINCT FROM EXCLUDED.cron
                        AND sc.every_ms IS NOT DISTINCT FROM EXCLUDED.every_ms
                        AND sc.tz IS NOT DISTINCT FROM EXCLUDED.tz
                       THEN sc.next_run_at ELSE EXCLUDED.next_run_at END,
    updated_at = now()
  WHERE sc.origin = EXCLUDED.origin
  RETURNING (xmax = 0) AS created
)
SELECT w.created,
       CASE WHEN w.created IS NOT NULL AND $10::text IS NOT NULL THEN pg_notify($10, '${SCHEDULES_NOTICE}')::text IS NOT NULL END AS notified
FROM (SELECT 1) one LEFT JOIN written w ON true`,

    /**
     * Removes runtime schedule $1; `origin` is the row's before the statement ('code' when $1 is
     * declared, and then nothing was removed). No notification: a removed row is never due again.
     */
    remove: `
WITH gone AS (
  DELETE FROM ${s}.schedule WHERE name = $1 AND origin = 'runtime' RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM gone) AS removed, (SELECT origin FROM ${s}.schedule WHERE name = $1) AS origin`,

    /** Schedule $1 (NULL: every schedule), by name; a small table (one row per schedule). */
    read: `
SELECT name, queue, cron, every_ms::float8 AS every_ms, tz, payload, missed, next_run_at, last_run_at, updated_at, origin
FROM ${s}.schedule WHERE $1::text IS NULL OR name = $1 ORDER BY name`,

    /**
     * Retire declared schedules of the given queues that the code no longer declares (runtime ones
     * stay until removeSchedule). $1 queue[], $2 kept name[].
     */
    retire: `
DELETE FROM ${s}.schedule WHERE origin = 'code' AND queue = ANY ($1::text[]) AND NOT (name = ANY ($2::text[])) RETURNING name`,

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
