import type { SchemaMigration } from '../schema.sql';

/**
 * Migration 21: schedules created at run time (TaskQueue.upsertSchedule) live in the `schedule`
 * table beside the declared ones, told apart by `origin`, so the one ticker pass (SKIP LOCKED on
 * due rows, see schedule.sql.ts) fires both exactly once per tick. `s`: the quoted schema name.
 * A column with a constant default is a catalogue change (no rewrite); its CHECK scans the table,
 * which holds one row per schedule. The step's short lock_timeout bounds the wait for the brief
 * ACCESS EXCLUSIVE lock (a ticker pass holds its rows for milliseconds).
 */
export function scheduleMigrations(s: string): SchemaMigration[] {
  return [
    {
      version: 21,
      name: 'schedule_origin',
      sql: `
-- 'code': declared in a handler's schedule or the schedules option (a startup writes it, and
-- retires it once the code no longer declares it); 'runtime': created by upsertSchedule and kept
-- until removeSchedule. A name is either, never both (see ScheduleNameTakenError).
ALTER TABLE ${s}.schedule ADD COLUMN IF NOT EXISTS origin text NOT NULL DEFAULT 'code'
  CONSTRAINT schedule_origin_check CHECK (origin IN ('code', 'runtime'));
`,
    },
  ];
}
