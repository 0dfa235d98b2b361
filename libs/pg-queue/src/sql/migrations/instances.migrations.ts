import type { SchemaMigration } from '../schema.sql';

/**
 * Migrations 19 and 25: the instances whose death Postgres can tell (see liveness.sql.ts), so that
 * their claims and limit slots come back seconds after they die instead of a lease later. `s`: the
 * quoted schema name. A new table, then two nullable columns: plain steps (see schema.sql.ts for
 * how migrations are applied). During a rolling deploy from before 19 an older instance neither
 * reads nor writes the table: its claims wait for their leases as before, and it never takes
 * anyone's claims but by an expired lease. From 19 to 25, an older instance judges everyone by
 * grace_ms, which this version writes no shorter than 10 s, and its own rows (silent_ms NULL) are
 * judged by their grace_ms.
 */
export function instanceMigrations(s: string): SchemaMigration[] {
  return [
    {
      version: 19,
      name: 'instance_session',
      sql: `
-- One row per running instance that found its LISTEN session's application_name (listener) in
-- pg_stat_activity: while no session of that name has been there for grace_ms, the instance is
-- taken for dead and its running tasks rescued. missing_since: since when a rescuer pass found it
-- gone (NULL while up). Deleted at the instance's shutdown, or once it is judged dead and holds no
-- running task. A few rows, all read by each rescuer pass.
CREATE TABLE IF NOT EXISTS ${s}.instance_session (
  instance       text        PRIMARY KEY,
  listener       text        NOT NULL,
  grace_ms       integer     NOT NULL,
  registered_at  timestamptz NOT NULL DEFAULT now(),
  missing_since  timestamptz
);
`,
    },
    {
      version: 25,
      name: 'instance_reconnecting',
      sql: `
-- silent_ms: how long the session may be gone while the instance says nothing before it is taken
-- for dead (grace_ms stays the longer bound that instances of an older version apply to it, as
-- they ignore these columns). reconnecting_until: the instance, its LISTEN connection lost, says
-- through its pool that it is alive and reconnecting; not judged before then. server_started:
-- pg_postmaster_start_time() when it registered: silent_ms holds only on that same server (after
-- a restart or a failover its LISTEN connection may not know yet that it is gone).
ALTER TABLE ${s}.instance_session ADD COLUMN IF NOT EXISTS silent_ms integer,
                                  ADD COLUMN IF NOT EXISTS reconnecting_until timestamptz,
                                  ADD COLUMN IF NOT EXISTS server_started timestamptz;
`,
    },
  ];
}
