import { quoteIdent } from './identifiers';
import { archiveMigrations } from './migrations/archive.migrations';
import { backoffMigrations } from './migrations/backoff.migrations';
import { fairnessMigrations } from './migrations/fairness.migrations';
import { flowMigrations } from './migrations/flow.migrations';
import { handlerMigrations } from './migrations/handlers.migrations';
import { inspectMigrations } from './migrations/inspect.migrations';
import { instanceMigrations } from './migrations/instances.migrations';
import { limitMigrations } from './migrations/limits.migrations';
import { pauseMigrations } from './migrations/pause.migrations';
import { scheduleMigrations } from './migrations/schedule.migrations';
import { reportMigrations } from './migrations/report.migrations';
import { taskMigrations } from './migrations/tasks.migrations';
import { watchMigrations } from './migrations/watch.migrations';
import { workflowMigrations } from './migrations/workflow.migrations';
import { printRuntimeFunctions } from './runtime-functions';

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
   * A step is SQL, run in a transaction with a short lock_timeout, or says how else to run it (see
   * SchemaStep). The SQL text is the same either way: it is also what printSchemaSql prints.
   */
  sql: string | readonly (string | SchemaStep)[];
  /**
   * A state part-way through the migration that must not last: while `steps_done` is between
   * `from` and `to`, the schema holds something that breaks later (migration 11: a CHECK on the
   * archive that fails every insert once its bound passes). When a step in that state fails, the
   * installer runs `undo` (back to the state before the migration) and records the migration as not
   * started, so the next start begins it again; and when it resumes the migration in that state and
   * `stale` (a query of one boolean column) says so, it undoes it first and starts over.
   */
  transient?: { from: number; to: number; undo: string; stale?: string };
}

/**
 * A step the installer runs otherwise than in a transaction with a short lock_timeout:
 * - `concurrently`: one `CREATE [UNIQUE] INDEX [IF NOT EXISTS] name ON ...` or `DROP INDEX [IF EXISTS]`
 *   on a live table, run CONCURRENTLY (outside a transaction) on an upgrade: writes go on during
 *   the build. An invalid index of that name (left by an interrupted build) is dropped and rebuilt.
 *   On a fresh install, and with a pool of one connection, it runs as written.
 * - `long`: a scan (VALIDATE CONSTRAINT) that takes no lock writers wait for but may run for long:
 *   no transaction or statement timeout, still the short lock_timeout for its locks.
 */
export interface SchemaStep {
  sql: string;
  run: 'concurrently' | 'long';
}

export type StepMode = 'transaction' | SchemaStep['run'];

/** The SQL of each step, as printed. */
export function migrationSteps(m: SchemaMigration): readonly string[] {
  return migrationStepPlans(m).map((p) => p.sql);
}

/** Each step with how the installer runs it. */
export function migrationStepPlans(m: SchemaMigration): readonly { sql: string; run: StepMode }[] {
  const steps = typeof m.sql === 'string' ? [m.sql] : m.sql;
  return steps.map((step) => (typeof step === 'string' ? { sql: step, run: 'transaction' } : { sql: step.sql, run: step.run }));
}

export function schemaMigrations(schema: string): SchemaMigration[] {
  const s = quoteIdent(schema);
  // By version: a concern's later migrations sit in its own file beside its first.
  return [...taskMigrations(s), ...flowMigrations(s), ...archiveMigrations(s), ...inspectMigrations(s), ...handlerMigrations(s), ...limitMigrations(s), ...workflowMigrations(s), ...pauseMigrations(s), ...instanceMigrations(s), ...reportMigrations(s), ...scheduleMigrations(s), ...watchMigrations(s), ...backoffMigrations(s), ...fairnessMigrations(s)].sort(
    (a, b) => a.version - b.version,
  );
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

/**
 * The full SQL, for `prisma/migrations` users: bootstrap plus every migration, each recorded, then
 * the runtime functions (runtime-functions.ts).
 */
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
  // Recorded in their comments, which the installer compares: it then finds them current.
  parts.push('-- runtime functions: no schema version; apply this section again whenever a release changes it');
  parts.push(...printRuntimeFunctions(schema));
  return parts.join('\n\n') + '\n';
}

function terminated(sql: string): string {
  return sql.endsWith(';') ? sql : `${sql};`;
}
