import type { SchemaMigration } from '../schema.sql';

/**
 * Migration 19: the instances whose death Postgres can tell (see liveness.sql.ts), so that their
 * claims and limit slots come back seconds after they die instead of a lease later. `s`: the quoted
 * schema name. A new table, so a plain step (see schema.sql.ts for how migrations are applied).
 * During a rolling deploy an older instance neither reads nor writes it: its claims wait for their
 * leases as before, and it never takes anyone's claims but by an expired lease.
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
  ];
}
