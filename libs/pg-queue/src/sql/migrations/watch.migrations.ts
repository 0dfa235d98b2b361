import type { SchemaMigration } from '../schema.sql';

/**
 * Migration 22: who waits for a task's end or watches a queue from another process (see
 * watch.sql.ts). `s`: the quoted schema name. A nullable column without a default (a catalog
 * change, no rewrite) and a new table. During a rolling deploy an older instance's completions
 * send no `!ended` notice: a waitFor for a task it ends resolves by its timeout or the next check.
 */
export function watchMigrations(s: string): SchemaMigration[] {
  return [
    {
      version: 22,
      name: 'task_watch',
      sql: `
-- Set by waitFor on the task's own row (NULL otherwise): the statement that ends the task reads it
-- from the row it locks, so a waiter marked before that statement is always told (see watch.sql.ts).
ALTER TABLE ${s}.task ADD COLUMN IF NOT EXISTS watched boolean;
-- One row per cross-process event stream and queue ('' for every queue), alive while 'until' is
-- ahead (the subscriber refreshes it). The statements that end tasks read it whole, once each: it
-- stays tiny (usually empty).
CREATE TABLE IF NOT EXISTS ${s}.task_watch (
  subscriber  text        NOT NULL,
  queue       text        NOT NULL DEFAULT '',
  until       timestamptz NOT NULL,
  PRIMARY KEY (subscriber, queue)
);
`,
    },
  ];
}
