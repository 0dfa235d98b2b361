import type { SchemaMigration } from '../schema.sql';

/**
 * Migration 13: which running instance handles which queue, so that a queue with due tasks and no
 * live handler (a typo in a @TaskHandler queue name, no worker deployed) shows in the logs,
 * metrics, health and the dashboard. `s`: the quoted schema name. See schema.sql.ts for how
 * migrations are applied; a new table, so a plain step.
 */
export function handlerMigrations(s: string): SchemaMigration[] {
  return [
    {
      version: 13,
      name: 'queue_handler',
      sql: `
-- One row per queue an instance handles, upserted at its start and on every periodic pass with
-- expires_at a few passes ahead (see handlers.sql.ts): a row not renewed by then is an instance that
-- died. Its shutdown sets expires_at to now(); rows expired for a day are deleted. A few rows per
-- instance: the primary key, led by queue, is all the per-queue reads need.
CREATE TABLE IF NOT EXISTS ${s}.queue_handler (
  queue       text        NOT NULL,
  instance    text        NOT NULL,
  seen_at     timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz NOT NULL,
  PRIMARY KEY (queue, instance)
);
`,
    },
  ];
}
