import { marked } from './fragments.sql';
import { quoteIdent } from './identifiers';
import { rescueFrom } from './maintain.sql';

/**
 * Dead instances' claims back in seconds instead of a lease (table instance_session, migrations 19
 * and 25).
 *
 * An instance's LISTEN connection (WakeupListener, the one connection of its own the library has)
 * carries an application_name that names the instance (listenerName in instance.liveness.ts).
 * Postgres drops that session when the process dies (SIGKILL, OOM kill, a crash: the kernel closes the
 * socket at once; a host or network gone: once the server's TCP keepalive gives up), and with it
 * the name from pg_stat_activity, which every role can read. An instance that found its name there
 * through its own pool records it here (`register`): from then on, a session of that name gone for
 * longer than the instance's silent_ms while the instance said nothing means it is dead, and the
 * other instances' rescuers take its running tasks back (`rescueGone`), fenced exactly as an
 * expired lease.
 *
 * What keeps the living safe:
 * - only instances that registered are judged (one without databaseUrl, one whose name a pooler or
 *   the URL replaced, or one with deadInstanceAfterMs false never is: its claims keep waiting for
 *   their leases);
 * - an instance whose LISTEN connection dropped says so through its pool at once and several times
 *   a window after (`reconnecting`: reconnecting_until, 10 s ahead or its window if longer): not
 *   judged while it does, so a LISTEN connection down for long (refused, a pooler, pg-listen's
 *   retries up to 5 s apart) costs it no claim, and a process that dies while reconnecting is
 *   judged once its word runs out;
 * - a name gone counts only once gone for the window (missing_since, set by the first rescuer pass
 *   that finds it gone, cleared by the first that finds it back or by the instance re-registering);
 * - silent_ms holds only for an instance that registered on this very server (server_started) and
 *   for a judge that trusts what it sees ($4: it did not lose its own LISTEN connection lately):
 *   after a restart or a failover every session is gone at once, some instances' LISTEN
 *   connections may not know it yet (a moved address sends no reset), and each gets grace_ms
 *   (at least 10 s) to come back or say it is reconnecting, as do rows of an older version
 *   (silent_ms NULL); older judges apply grace_ms to everyone;
 * - an instance never judges itself;
 * - rows held by a live transactional handler are locked, hence skipped, as for expired leases.
 */
export function livenessStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    /**
     * This instance's listener session is up under name $2: recorded (missing_since and
     * reconnecting_until cleared) only if this database shows a session of that name, so that one
     * whose name never reaches the server is never judged by it. Returns one row when recorded.
     * Parameters: $1 instance, $2 listener name, $3 grace ms, $4 silent ms.
     */
    register: `
INSERT INTO ${s}.instance_session (instance, listener, grace_ms, silent_ms, server_started)
SELECT $1::text, $2::text, $3::int, $4::int, pg_postmaster_start_time()
WHERE EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND application_name = $2::text)
ON CONFLICT (instance) DO UPDATE SET listener = excluded.listener, grace_ms = excluded.grace_ms, silent_ms = excluded.silent_ms,
                                     server_started = excluded.server_started, registered_at = now(),
                                     missing_since = NULL, reconnecting_until = NULL
RETURNING 1 AS registered`,

    /**
     * This instance is alive and its LISTEN connection is down: not to be judged for $2 ms, or
     * its silent window if longer. (Its next registration clears it; the instance waits for this
     * statement before registering.) Parameters: $1 instance, $2 ms.
     */
    reconnecting: `
UPDATE ${s}.instance_session SET reconnecting_until = now() + greatest($2::int, coalesce(silent_ms, 0)) * interval '1 millisecond'
WHERE instance = $1::text`,

    /** At shutdown (its claims released or waiting for their leases): forget it. Parameters: $1 instance. */
    retire: `DELETE FROM ${s}.instance_session WHERE instance = $1::text`,

    /**
     * One rescuer pass over the other registered instances ($3: this one), each row taken FOR
     * UPDATE SKIP LOCKED (two rescuers never judge one instance at once): whether its listener
     * session is up now; missing_since set when it is newly gone and cleared when it is back (a
     * data-modifying CTE: the pass after sees it); the running tasks of those judged dead (gone
     * for longer than their window by the row as this statement found it, so never in the pass
     * that first found it gone, and not saying they reconnect) rescued, at most $1; and the rows
     * of those judged dead that held no running task when the statement began forgotten.
     * `next_check_ms`: when the earliest instance found gone and not yet judged may be (null:
     * none), so the rescuer can look again then rather than a whole interval later.
     * Parameters: $1 batch limit, $2 channel, $3 this instance, $4 whether this judge applies
     * silent_ms (it has not lost its own LISTEN connection lately: see InstanceLiveness.trusted).
     */
    rescueGone: rescueFrom(s, {
      ctes: `sessions AS MATERIALIZED (
  SELECT i.instance, i.missing_since, i.reconnecting_until,
         CASE WHEN $4::boolean AND i.silent_ms IS NOT NULL AND i.server_started = pg_postmaster_start_time() THEN i.silent_ms
              ELSE i.grace_ms END * interval '1 millisecond' AS window_,
         i.listener IN (SELECT application_name FROM pg_stat_activity WHERE datname = current_database()) AS live
  FROM ${s}.instance_session i
  WHERE i.instance <> $3::text
  FOR UPDATE OF i SKIP LOCKED
), marked AS (
  UPDATE ${s}.instance_session i SET missing_since = CASE WHEN x.live THEN NULL ELSE now() END
  FROM sessions x
  WHERE i.instance = x.instance AND x.live = (x.missing_since IS NOT NULL)
  RETURNING 1
), gone AS (
  SELECT instance FROM sessions
  WHERE NOT live AND missing_since <= now() - window_ AND (reconnecting_until IS NULL OR reconnecting_until < now())
), forgotten AS (
  DELETE FROM ${s}.instance_session i USING gone g
  WHERE i.instance = g.instance
    AND NOT EXISTS (SELECT 1 FROM ${s}.task t WHERE t.state = 'running' AND t.locked_by = g.instance)
  RETURNING 1
)`,
      candidates: `
  SELECT t.id
  FROM ${s}.task t
  WHERE t.state = 'running' AND t.locked_by IN (SELECT instance FROM gone)
  ORDER BY t.locked_until
  LIMIT $1
  FOR UPDATE OF t SKIP LOCKED`,
      lastError: "'instance gone: worker ' || coalesce(t.locked_by, '?') || ' lost its database session before it finished attempt ' || t.attempt",
      extra: `(SELECT count(*) FROM marked)::int AS marked, (SELECT count(*) FROM forgotten)::int AS forgotten,
       (SELECT count(*) FROM gone)::int AS gone,
       (SELECT (extract(epoch FROM min(greatest(coalesce(x.missing_since, now()) + x.window_, x.reconnecting_until)) - now()) * 1000)::float8
        FROM sessions x WHERE NOT x.live AND x.instance NOT IN (SELECT instance FROM gone)) AS next_check_ms`,
    }),
  });
}
