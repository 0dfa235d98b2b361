import type { SchemaMigration } from '../schema.sql';

/**
 * Migrations 6-10: flow control (partitions, limits, debounce, dependencies, per-partition rate windows) and the dashboard's index.
 * `s`: the quoted schema name. See schema.sql.ts for how migrations are applied.
 */
export function flowMigrations(s: string): SchemaMigration[] {
  return [
    {
      version: 6,
      name: 'flow_control',
      sql: [
        `
-- Flow control (limits.sql.ts): a task's partition (the enqueue option), and one row per limited
-- queue with what its claims share: the partition to start the next round at, and the start times
-- of the rate window. Catalog changes only.
ALTER TABLE ${s}.task ADD COLUMN partition_key text;
ALTER TABLE ${s}.task_archive ADD COLUMN partition_key text;
CREATE TABLE IF NOT EXISTS ${s}.queue_state (
  queue            text        PRIMARY KEY,
  partition_cursor text,
  rate_starts      timestamptz[] NOT NULL DEFAULT '{}'
);
`,
        {
          run: 'concurrently',
          sql: `
-- Running tasks by queue and partition: a limited claim counts them (global and per-partition
-- concurrency), the rescuer scans them for expired leases, the metrics count them. It replaces
-- task_lease_idx (locked_until) at no extra cost per claim: running rows are few, and a claim adds
-- one entry either way.
CREATE INDEX IF NOT EXISTS task_running_idx ON ${s}.task (queue, partition_key, locked_until) WHERE state = 'running';
`,
        },
        { sql: `DROP INDEX IF EXISTS ${s}.task_lease_idx;`, run: 'concurrently' },
        {
          run: 'concurrently',
          sql: `
-- A partitioned queue's due work, partition by partition (the claim's round over partitions); only
-- tasks with a partition are in it.
CREATE INDEX IF NOT EXISTS task_partition_idx ON ${s}.task (queue, partition_key, priority, run_at, id)
  WHERE state = 'pending' AND partition_key IS NOT NULL;
`,
        },
      ],
    },
    {
      version: 7,
      name: 'dashboard',
      // One index build, in a step of its own, CONCURRENTLY on an upgrade (see migration 4).
      sql: [
        {
          run: 'concurrently',
          sql: `
-- Tasks waiting for a retry, by when their last attempt failed, per queue: the dashboard's
-- "failed per minute" reads the hour's failures here instead of every pending row of a queue
-- (delayed tasks can number millions). Only a failed attempt's row version enters it; the claim
-- that retries the task writes a version that does not.
CREATE INDEX IF NOT EXISTS task_retrying_idx ON ${s}.task (queue, finished_at)
  WHERE state = 'pending' AND last_error IS NOT NULL;
`,
        },
      ],
    },
    {
      version: 8,
      name: 'debounce',
      sql: [
        `
-- Debounce (debounce.sql.ts): the key of a burst's task and the latest its run may be pushed to;
-- for leading debounce, per key, when its burst goes quiet (and what the previous request set).
-- Catalog changes only.
ALTER TABLE ${s}.task ADD COLUMN debounce_key text, ADD COLUMN debounce_until timestamptz;
CREATE TABLE IF NOT EXISTS ${s}.task_debounce (
  queue            text        NOT NULL,
  key              text        NOT NULL,
  quiet_until      timestamptz NOT NULL,
  prev_quiet_until timestamptz,
  PRIMARY KEY (queue, key)
);
`,
        {
          run: 'concurrently',
          sql: `
-- The burst a request folds into: the key's pending task that has not started (a claim sets
-- started_at, and a release or retry keeps it), at most one per key.
CREATE UNIQUE INDEX IF NOT EXISTS task_debounce_idx ON ${s}.task (queue, debounce_key)
  WHERE debounce_key IS NOT NULL AND state = 'pending' AND started_at IS NULL;
`,
        },
      ],
    },
    {
      version: 9,
      name: 'dependencies',
      sql: [
        `
-- Fan-in dependencies (dependencies.sql.ts): a dependant waits in state 'waiting' until deps_left
-- of its parents (depends_on) are done; a parent lists its dependants. A handler's return value is
-- archived as result, and handed to dependants in parent_results. Dependency debts: a parent's end
-- that its dependants have yet to be told of. The new CHECK is NOT VALID here and validated in the
-- next step, so the catalog change holds its lock only briefly.
ALTER TABLE ${s}.task
  ADD COLUMN depends_on bigint[],
  ADD COLUMN deps_left integer,
  ADD COLUMN dependants bigint[],
  ADD COLUMN parent_results jsonb;
ALTER TABLE ${s}.task_archive
  ADD COLUMN depends_on bigint[],
  ADD COLUMN dependants bigint[],
  ADD COLUMN result jsonb;
ALTER TABLE ${s}.task DROP CONSTRAINT task_state_check;
ALTER TABLE ${s}.task ADD CONSTRAINT task_state_check
  CHECK (state IN ('pending', 'running', 'dead', 'cancelled', 'waiting')) NOT VALID;
CREATE TABLE IF NOT EXISTS ${s}.task_dependency_debt (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  dependant  bigint NOT NULL,
  parent     bigint NOT NULL,
  outcome    text   NOT NULL CHECK (outcome IN ('done', 'dead', 'cancelled')),
  result     jsonb
);
`,
        { sql: `ALTER TABLE ${s}.task VALIDATE CONSTRAINT task_state_check;`, run: 'long' },
      ],
    },
    {
      version: 10,
      name: 'partition_rate',
      sql: `
-- Rate limits per partition (rateLimit.perPartition, limits.sql.ts): per queue and partition ('' for
-- tasks without one), the start times inside the window, and the window, so the pruner can drop a
-- row whose starts have all left it.
CREATE TABLE IF NOT EXISTS ${s}.partition_rate (
  queue          text          NOT NULL,
  partition_key  text          NOT NULL,
  window_ms      bigint        NOT NULL,
  starts         timestamptz[] NOT NULL,
  PRIMARY KEY (queue, partition_key)
);
`,
    },
  ];
}
