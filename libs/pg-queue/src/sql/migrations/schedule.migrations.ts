import type { SchemaMigration } from '../schema.sql';

/**
 * Migration 21: schedules created at run time (TaskQueue.upsertSchedule) get a table of their own,
 * `schedule_runtime`, beside the declared ones' `schedule`. `s`: the quoted schema name. A new
 * table, so a plain step (see schema.sql.ts for how migrations are applied); `schedule` is not
 * touched, so instances of earlier releases go on as before during a rolling deploy.
 */
export function scheduleMigrations(s: string): SchemaMigration[] {
  return [
    {
      version: 21,
      name: 'schedule_runtime',
      sql: `
-- Schedules created at run time (upsertSchedule), kept until removeSchedule; the columns and checks
-- of schedule. Not in schedule: an instance of an earlier release declares and retires the rows of
-- schedule by name and queue at startup, and would delete or change a runtime schedule there; it
-- never reads this table (nor fires its schedules: newer instances do). A name is in one of the
-- two tables (see ScheduleNameTakenError and schedule.sql.ts). Ticked like schedule: the due rows
-- are locked with SKIP LOCKED, so a tick enqueues once across instances.
CREATE TABLE IF NOT EXISTS ${s}.schedule_runtime (
  name          text        PRIMARY KEY,
  queue         text        NOT NULL,
  cron          text,
  every_ms      bigint      CHECK (every_ms IS NULL OR every_ms > 0),
  tz            text,
  payload       jsonb       NOT NULL DEFAULT '{}',
  missed        text        NOT NULL DEFAULT 'skip' CHECK (missed IN ('skip', 'once')),
  next_run_at   timestamptz NOT NULL,
  last_run_at   timestamptz,
  updated_at    timestamptz NOT NULL DEFAULT now(),
  CHECK ((cron IS NULL) <> (every_ms IS NULL))
);
CREATE INDEX IF NOT EXISTS schedule_runtime_due_idx ON ${s}.schedule_runtime (next_run_at);
`,
    },
  ];
}
