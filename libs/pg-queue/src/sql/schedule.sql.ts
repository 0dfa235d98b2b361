import { marked } from './fragments.sql';
import { quoteIdent } from './identifiers';

/** A schedule was created or changed at run time (see WakeupListener): tickers look again now. */
export const SCHEDULES_NOTICE = '!schedules';

/** First key of the advisory lock that orders the writes of one schedule name; the second is hashtext(schema.name). */
const SCHEDULE_NAME_LOCK_NAMESPACE = 0x70_67_73; // "pgs"

/**
 * Declare (into `schedule`) or create / change at run time (into `schedule_runtime`) a schedule,
 * unless the other table holds the name. The next tick is kept unless the timing itself changed.
 * No row comes back from the insert when the other table holds the name (`created` NULL), which
 * the caller turns into ScheduleNameTakenError. When $9 (the channel) is given, a write is announced
 * at commit (`!schedules`): the tickers of running instances recompute their sleep at once instead
 * of after up to 30 s. Run after `lockName` in the same READ COMMITTED transaction: this statement's
 * snapshot is taken after the lock, so it sees a write of the same name into the other table that
 * committed while it waited. Parameters: $1 name, $2 queue, $3 cron, $4 every_ms, $5 tz,
 * $6 payload, $7 missed, $8 first tick, $9 channel or NULL.
 */
function upsertInto(table: string, other: string): string {
  return `
WITH written AS (
  INSERT INTO ${table} AS sc (name, queue, cron, every_ms, tz, payload, missed, next_run_at)
  SELECT $1, $2, $3, $4, $5, $6::jsonb, $7, $8::timestamptz
  WHERE NOT EXISTS (SELECT 1 FROM ${other} WHERE name = $1)
  ON CONFLICT (name) DO UPDATE SET
    queue = EXCLUDED.queue, payload = EXCLUDED.payload, missed = EXCLUDED.missed,
    cron = EXCLUDED.cron, every_ms = EXCLUDED.every_ms, tz = EXCLUDED.tz,
    next_run_at = CASE WHEN sc.cron IS NOT DISTINCT FROM EXCLUDED.cron
                        AND sc.every_ms IS NOT DISTINCT FROM EXCLUDED.every_ms
                        AND sc.tz IS NOT DISTINCT FROM EXCLUDED.tz
                       THEN sc.next_run_at ELSE EXCLUDED.next_run_at END,
    updated_at = now()
  RETURNING (xmax = 0) AS created
)
SELECT w.created,
       CASE WHEN w.created IS NOT NULL AND $9::text IS NOT NULL THEN pg_notify($9, '${SCHEDULES_NOTICE}')::text IS NOT NULL END AS notified
FROM (SELECT 1) one LEFT JOIN written w ON true`;
}

/** Due rows of `table`, locked for this transaction (SKIP LOCKED), `runtime` telling the table. */
function dueIn(table: string, runtime: boolean): string {
  return `
  SELECT name, queue, cron, every_ms::float8 AS every_ms, tz, payload, missed, next_run_at, now() AS db_now, ${runtime} AS runtime
  FROM ${table} WHERE next_run_at <= now()
  ORDER BY next_run_at LIMIT 50
  FOR UPDATE SKIP LOCKED`;
}

/** $1 name, $2 next tick, $3 last tick fired (or NULL). */
const advanceIn = (table: string) => `
UPDATE ${table} SET next_run_at = $2, last_run_at = coalesce($3, last_run_at) WHERE name = $1`;

/**
 * Schedules, persisted so that every instance agrees on the next tick: declared in code in
 * `schedule`, created at run time in `schedule_runtime` (migration 21). Two tables so that an
 * instance of a release before runtime schedules, which runs during a rolling deploy and declares
 * and retires rows of `schedule` by name and queue, never deletes or changes a runtime schedule.
 * Both kinds tick by the same pass (lockDue/advance). One name space: a name is in one table only
 * (`lockName` and `upsertInto`), except that an older instance, which does not know
 * `schedule_runtime`, may declare a name a runtime schedule holds (then both fire).
 */
export function scheduleStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    /**
     * The first statement of a transaction that writes a schedule of either kind: a
     * transaction-scoped advisory lock on the name, so a declaration and a runtime upsert of one
     * name are serialised and the later one sees the earlier (see upsertInto). $1 schema, $2 name.
     */
    lockName: `
SELECT pg_advisory_xact_lock(${SCHEDULE_NAME_LOCK_NAMESPACE}, hashtext($1 || '.' || $2))::text AS locked`,

    /** Declares a schedule (a startup); not announced, see upsertInto. */
    declare: upsertInto(`${s}.schedule`, `${s}.schedule_runtime`),

    /** Creates or changes a runtime schedule (upsertSchedule), see upsertInto. */
    upsertRuntime: upsertInto(`${s}.schedule_runtime`, `${s}.schedule`),

    /**
     * Removes runtime schedule $1; `declared`: a declared schedule has the name (when nothing was
     * removed, upsertSchedule's caller is told it is declared). No notification: a removed row is
     * never due again.
     */
    remove: `
WITH gone AS (
  DELETE FROM ${s}.schedule_runtime WHERE name = $1 RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM gone) AS removed, EXISTS (SELECT 1 FROM ${s}.schedule WHERE name = $1) AS declared`,

    /**
     * Schedule $1 (NULL: every schedule) of both tables, by name, the declared one first should an
     * older instance have declared a runtime schedule's name; small tables (one row per schedule).
     */
    read: `
SELECT name, queue, cron, every_ms::float8 AS every_ms, tz, payload, missed, next_run_at, last_run_at, updated_at, true AS declared
FROM ${s}.schedule WHERE $1::text IS NULL OR name = $1
UNION ALL
SELECT name, queue, cron, every_ms::float8, tz, payload, missed, next_run_at, last_run_at, updated_at, false
FROM ${s}.schedule_runtime WHERE $1::text IS NULL OR name = $1
ORDER BY name, declared DESC`,

    /**
     * Retire declared schedules of the given queues that the code no longer declares. It touches
     * `schedule` only: runtime schedules are in a table of their own. $1 queue[],
     * $2 kept name[].
     */
    retire: `
DELETE FROM ${s}.schedule WHERE queue = ANY ($1::text[]) AND NOT (name = ANY ($2::text[])) RETURNING name`,

    /**
     * Due schedules of both tables, each table's rows locked for this transaction with SKIP LOCKED:
     * another instance skips them, so a tick is enqueued once. An instance older than migration 21
     * locks and fires due rows of `schedule` alone: it never fires a runtime schedule, the newer
     * instances do. Returns the database clock too, the only clock ticks are judged by.
     */
    lockDue: `
WITH declared AS (${dueIn(`${s}.schedule`, false)}
), runtime AS (${dueIn(`${s}.schedule_runtime`, true)}
)
SELECT * FROM declared UNION ALL SELECT * FROM runtime ORDER BY next_run_at`,

    advanceDeclared: advanceIn(`${s}.schedule`),
    advanceRuntime: advanceIn(`${s}.schedule_runtime`),

    /** Milliseconds until the earliest tick of either table (NULL without schedules). */
    untilNext: `
SELECT (extract(epoch FROM least((SELECT min(next_run_at) FROM ${s}.schedule),
                                 (SELECT min(next_run_at) FROM ${s}.schedule_runtime)) - now()) * 1000)::float8 AS ms`,
  });
}
