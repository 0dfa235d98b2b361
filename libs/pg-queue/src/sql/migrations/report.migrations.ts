import type { SchemaMigration } from '../schema.sql';

/**
 * Migration 20: a task's progress and log (issue 27; see task-report.sql.ts). `s`: the quoted
 * schema name. Columns of the task row, not a table of their own, so that they move to the archive
 * in the statement that archives the row and go with it: deleted with a `delete`-retention task,
 * dropped with the archive's partition, no pruning of their own. Nullable and without a default:
 * ADD COLUMN is a catalog change on a live table of any size (no rewrite, a lock of milliseconds),
 * and on the partitioned archive it reaches every partition, which later ones copy (LIKE).
 */
export function reportMigrations(s: string): SchemaMigration[] {
  return [
    {
      version: 20,
      name: 'task_progress_log',
      sql: `
-- The last progress a live attempt reported (JSON, small), and the task's log: a JSON array of
-- entries, its handlers' ctx.log lines and each failed attempt's error, the newest kept.
ALTER TABLE ${s}.task ADD COLUMN IF NOT EXISTS progress jsonb;
ALTER TABLE ${s}.task ADD COLUMN IF NOT EXISTS log jsonb;
ALTER TABLE ${s}.task_archive ADD COLUMN IF NOT EXISTS progress jsonb;
ALTER TABLE ${s}.task_archive ADD COLUMN IF NOT EXISTS log jsonb;
`,
    },
  ];
}
