import type { SchemaMigration } from '../schema.sql';

/**
 * Migration 23: back-offs a handler asked for (RateLimitedError, see backoff.sql.ts) and named
 * limiters shared across queues (limiter.sql.ts). `s`: the quoted schema name. New tables only, so
 * a plain step. During a rolling deploy an older instance neither reads nor writes them: its
 * claims ignore the back-offs and limiter budgets of this version (each holds its own rules).
 */
export function backoffMigrations(s: string): SchemaMigration[] {
  return [
    {
      version: 23,
      name: 'backoff_and_limiters',
      sql: `
-- One row per back-off: a queue (scope 'queue'), a partition of it ('partition'; partition_key ''
-- for the tasks without one) or a named limiter ('limiter', name = the limiter) is not claimed
-- until 'until'. Rows are only inserted (concurrent back-offs never wait for each other); the one
-- that ends last wins, and expired rows are deleted by later back-offs. Every plain claim probes it
-- by (name, scope) once (see notBackedOff): it stays tiny.
CREATE TABLE IF NOT EXISTS ${s}.backoff (
  id             bigserial   PRIMARY KEY,
  scope          text        NOT NULL CHECK (scope IN ('queue', 'partition', 'limiter')),
  name           text        NOT NULL,
  partition_key  text        NOT NULL DEFAULT '',
  until          timestamptz NOT NULL,
  set_at         timestamptz NOT NULL DEFAULT now(),
  task_id        bigint      NOT NULL,
  reason         text
);
CREATE INDEX IF NOT EXISTS backoff_scope_idx ON ${s}.backoff (name, scope, partition_key, until);
-- A named limiter's rate window (rate-window.sql.ts), shared by every queue that uses it.
CREATE TABLE IF NOT EXISTS ${s}.limiter_state (
  name     text          PRIMARY KEY,
  rate_at  timestamptz[] NOT NULL DEFAULT '{}',
  rate_n   integer[]     NOT NULL DEFAULT '{}'
);
-- Which queues use which limiter, as every instance that handles one says at its start: a
-- limiter's running tasks are counted over all of them, including queues this instance does not run.
CREATE TABLE IF NOT EXISTS ${s}.limiter_queue (
  limiter  text        NOT NULL,
  queue    text        NOT NULL,
  seen_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (limiter, queue)
);
`,
    },
  ];
}
