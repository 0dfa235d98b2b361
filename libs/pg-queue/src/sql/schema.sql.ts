import { quoteIdent } from './identifiers';
import { archiveMigrations } from './migrations/archive.migrations';
import { flowMigrations } from './migrations/flow.migrations';
import { taskMigrations } from './migrations/tasks.migrations';

/**
 * The queue's tables, as an ordered list of migrations. The installer applies the ones a database
 * lacks, under an advisory lock, and records them in `schema_version`; `printSchemaSql()` emits the
 * same text for teams who keep it in `prisma/migrations`.
 *
 * Layout decisions:
 * - `task` is the hot table: only pending, running and dead rows. Finished rows move to
 *   `task_archive` (or are deleted), so the claim index never grows with history.
 * - `task_archive` is partitioned by finished_at (migration 11): retention drops whole partitions.
 * - The claim index is partial on `state = 'pending'`: claim order (priority, run_at, id) is the
 *   index order, and running/dead rows are not in it at all.
 * - Error text is truncated by the library before it is written, so rows stay under the TOAST limit.
 */
export interface SchemaMigration {
  version: number;
  name: string;
  /**
   * One step, or several. Each step commits in its own transaction together with the record of it
   * (`schema_version.steps_done`), so an interrupted migration resumes at its next step and a lock
   * an earlier step took is not held by a later one (ADD CONSTRAINT … NOT VALID, then VALIDATE).
   */
  sql: string | readonly string[];
}

export function migrationSteps(m: SchemaMigration): readonly string[] {
  return typeof m.sql === 'string' ? [m.sql] : m.sql;
}

export function schemaMigrations(schema: string): SchemaMigration[] {
  const s = quoteIdent(schema);
  return [...taskMigrations(s), ...flowMigrations(s), ...archiveMigrations(s)];
}

/** Everything needed to create the schema from nothing, including the version bookkeeping. */
export function schemaBootstrapSql(schema: string): string {
  const s = quoteIdent(schema);
  return `
CREATE SCHEMA IF NOT EXISTS ${s};
CREATE TABLE IF NOT EXISTS ${s}.schema_version (
  version     integer     PRIMARY KEY,
  name        text        NOT NULL,
  applied_at  timestamptz NOT NULL DEFAULT now()
);
-- Steps of a migration committed so far while it is unfinished; NULL once it is applied.
ALTER TABLE ${s}.schema_version ADD COLUMN IF NOT EXISTS steps_done integer;`;
}

/** The full SQL, for `prisma/migrations` users: bootstrap plus every migration, each recorded. */
export function printSchemaSql(schema: string): string {
  const s = quoteIdent(schema);
  const parts = [`-- pg-queue schema "${schema}"`, schemaBootstrapSql(schema).trim()];
  for (const m of schemaMigrations(schema)) {
    parts.push(`-- migration ${m.version}: ${m.name}`);
    // Run from one file, the steps share a transaction; harmless on an empty table. For an upgrade
    // of a large one, put each step in a migration of its own.
    migrationSteps(m).forEach((step, i, all) => {
      if (all.length > 1) parts.push(`-- step ${i + 1} of ${all.length}`);
      parts.push(terminated(step.trim()));
    });
    parts.push(`INSERT INTO ${s}.schema_version (version, name) VALUES (${m.version}, '${m.name}') ON CONFLICT DO NOTHING;`);
  }
  return parts.join('\n\n') + '\n';
}

function terminated(sql: string): string {
  return sql.endsWith(';') ? sql : `${sql};`;
}
