import { quoteIdent } from './identifiers';

/**
 * The queue's tables, as an ordered list of migrations. The installer applies the ones a database
 * lacks, under an advisory lock, and records them in `schema_version`; `printSchemaSql()` emits the
 * same text for teams who keep it in `prisma/migrations`.
 *
 * Layout decisions:
 * - `task` is the hot table: only pending, running and dead rows. Finished rows move to
 *   `task_archive` (or are deleted), so the claim index never grows with history.
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
  return [
    {
      version: 1,
      name: 'tasks',
      sql: `
CREATE TABLE ${s}.task (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  queue         text        NOT NULL,
  state         text        NOT NULL DEFAULT 'pending'
                CHECK (state IN ('pending', 'running', 'dead')),
  payload       jsonb       NOT NULL,
  priority      integer     NOT NULL DEFAULT 0,
  run_at        timestamptz NOT NULL DEFAULT now(),
  attempt       integer     NOT NULL DEFAULT 0,
  max_attempts  integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
  locked_by     text,
  lease_token   uuid,
  locked_until  timestamptz,
  last_error    text,
  parent_id     bigint,
  created_at    timestamptz NOT NULL DEFAULT now(),
  started_at    timestamptz,
  finished_at   timestamptz
) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);

-- Claim: the next pending tasks of a queue in (priority, run_at, id) order.
CREATE INDEX task_claim_idx ON ${s}.task (queue, priority, run_at, id) WHERE state = 'pending';
-- Rescue: running tasks whose lease ran out.
CREATE INDEX task_lease_idx ON ${s}.task (locked_until) WHERE state = 'running';
-- Inspection of dead tasks per queue.
CREATE INDEX task_dead_idx ON ${s}.task (queue, finished_at) WHERE state = 'dead';

CREATE TABLE ${s}.task_archive (
  id            bigint      PRIMARY KEY,
  queue         text        NOT NULL,
  state         text        NOT NULL CHECK (state IN ('done', 'cancelled')),
  payload       jsonb       NOT NULL,
  priority      integer     NOT NULL,
  run_at        timestamptz NOT NULL,
  attempt       integer     NOT NULL,
  max_attempts  integer     NOT NULL,
  last_error    text,
  parent_id     bigint,
  created_at    timestamptz NOT NULL,
  started_at    timestamptz,
  finished_at   timestamptz NOT NULL
);
-- Pruning and per-hour throughput.
CREATE INDEX task_archive_finished_idx ON ${s}.task_archive (finished_at);
CREATE INDEX task_archive_parent_idx ON ${s}.task_archive (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX task_parent_idx ON ${s}.task (parent_id) WHERE parent_id IS NOT NULL;
`,
    },
    {
      version: 2,
      name: 'scheduling',
      sql: `
-- Dedup keys: at most one pending-or-running task per (queue, key), enforced by the database.
-- rerun_payload holds the newest payload for a running task re-enqueued with onConflict 'rerun'.
ALTER TABLE ${s}.task
  ADD COLUMN dedup_key text,
  ADD COLUMN group_key text,
  ADD COLUMN rerun_payload jsonb;
ALTER TABLE ${s}.task DROP CONSTRAINT task_state_check;
ALTER TABLE ${s}.task ADD CONSTRAINT task_state_check CHECK (state IN ('pending', 'running', 'dead', 'cancelled'));
ALTER TABLE ${s}.task_archive
  ADD COLUMN dedup_key text,
  ADD COLUMN group_key text;
CREATE UNIQUE INDEX task_dedup_idx ON ${s}.task (queue, dedup_key)
  WHERE dedup_key IS NOT NULL AND state IN ('pending', 'running');
-- Per-group FIFO: "is there an earlier or running task of this group?" is an index probe.
CREATE INDEX task_group_idx ON ${s}.task (queue, group_key, id)
  WHERE group_key IS NOT NULL AND state IN ('pending', 'running');

-- Cancel requests for running tasks. A separate table because a transactional handler holds its
-- task row locked: the request must land without waiting for it.
CREATE TABLE ${s}.task_cancel (
  task_id       bigint      PRIMARY KEY,
  requested_at  timestamptz NOT NULL DEFAULT now()
);

-- Schedules declared in code. A tick is claimed (SKIP LOCKED) and advanced in the same
-- transaction that enqueues its task, so each tick enqueues exactly once across instances.
CREATE TABLE ${s}.schedule (
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
CREATE INDEX schedule_due_idx ON ${s}.schedule (next_run_at);
`,
    },
    {
      version: 3,
      name: 'lease_token_means_running',
      sql: [
        `
-- The lease statements fence by (id, lease_token) alone (see complete.sql.ts): a token exists
-- exactly while the task runs. Two steps: NOT VALID holds ACCESS EXCLUSIVE only for the catalog
-- change and commits; VALIDATE then checks existing rows under SHARE UPDATE EXCLUSIVE, which lets
-- writes through.
ALTER TABLE ${s}.task ADD CONSTRAINT task_lease_token_check
  CHECK ((state = 'running') = (lease_token IS NOT NULL)) NOT VALID;
`,
        `ALTER TABLE ${s}.task VALIDATE CONSTRAINT task_lease_token_check;`,
      ],
    },
    {
      version: 4,
      name: 'settings_where_tasks_run',
      // Steps, so no lock outlives its step: the first changes only the catalog; each index build
      // holds writes back while it runs (on a large queue table, print the SQL and build them
      // CONCURRENTLY by hand first: the steps then find them, IF NOT EXISTS).
      sql: [
        `
-- The handler that runs a task governs its attempts (DESIGN 16): max_attempts is only the
-- enqueuer's explicit choice (NULL: the handler decides). Each claim records the limit in force
-- in attempt_limit, which the failure statement and the rescuer read: a rescuer in any process
-- then applies the limit of the handler that ran the attempt.
-- group_pos: a task's place in its group when a failure moved it to the back (retryBlocksGroup
-- false); otherwise its id is its place (see task_group_pos_idx).
ALTER TABLE ${s}.task
  ALTER COLUMN max_attempts DROP NOT NULL,
  ALTER COLUMN max_attempts DROP DEFAULT,
  ADD COLUMN attempt_limit integer,
  ADD COLUMN group_pos bigint;
ALTER TABLE ${s}.task_archive ALTER COLUMN max_attempts DROP NOT NULL;
`,
        `
-- Due times by queue: when the next delayed task or retry of a queue is due (the worker sets its
-- timer from it), and whether anything is due at all, in one index probe however many tasks wait
-- for a later time (task_claim_idx orders by priority first and cannot answer either).
CREATE INDEX IF NOT EXISTS task_due_idx ON ${s}.task (queue, run_at) WHERE state = 'pending';
`,
        `
-- Per-group FIFO by place in the group: only a group's first task may run (see claim.sql.ts).
CREATE INDEX IF NOT EXISTS task_group_pos_idx ON ${s}.task (queue, group_key, (coalesce(group_pos, id)))
  WHERE group_key IS NOT NULL AND state IN ('pending', 'running');
`,
        `DROP INDEX IF EXISTS ${s}.task_group_idx;`,
      ],
    },
    {
      version: 5,
      name: 'trace_context',
      sql: [
        `
-- The trace context active when a task was enqueued (OpenTelemetry's propagation carrier, e.g.
-- {"traceparent": "00-..."}), so its handler's span continues that trace. NULL without tracing.
-- Adding a nullable column without a default changes only the catalog.
ALTER TABLE ${s}.task ADD COLUMN trace_context jsonb;
ALTER TABLE ${s}.task_archive ADD COLUMN trace_context jsonb;
`,
      ],
    },
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
        `
-- Running tasks by queue and partition: a limited claim counts them (global and per-partition
-- concurrency), the rescuer scans them for expired leases, the metrics count them. It replaces
-- task_lease_idx (locked_until) at no extra cost per claim: running rows are few, and a claim adds
-- one entry either way.
CREATE INDEX IF NOT EXISTS task_running_idx ON ${s}.task (queue, partition_key, locked_until) WHERE state = 'running';
`,
        `DROP INDEX IF EXISTS ${s}.task_lease_idx;`,
        `
-- A partitioned queue's due work, partition by partition (the claim's round over partitions); only
-- tasks with a partition are in it.
CREATE INDEX IF NOT EXISTS task_partition_idx ON ${s}.task (queue, partition_key, priority, run_at, id)
  WHERE state = 'pending' AND partition_key IS NOT NULL;
`,
      ],
    },
    {
      version: 7,
      name: 'dashboard',
      // One index build, in a step of its own (see migration 4 for building it CONCURRENTLY first).
      sql: [
        `
-- Tasks waiting for a retry, by when their last attempt failed, per queue: the dashboard's
-- "failed per minute" reads the hour's failures here instead of every pending row of a queue
-- (delayed tasks can number millions). Only a failed attempt's row version enters it; the claim
-- that retries the task writes a version that does not.
CREATE INDEX IF NOT EXISTS task_retrying_idx ON ${s}.task (queue, finished_at)
  WHERE state = 'pending' AND last_error IS NOT NULL;
`,
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
        `
-- The burst a request folds into: the key's pending task that has not started (a claim sets
-- started_at, and a release or retry keeps it), at most one per key.
CREATE UNIQUE INDEX IF NOT EXISTS task_debounce_idx ON ${s}.task (queue, debounce_key)
  WHERE debounce_key IS NOT NULL AND state = 'pending' AND started_at IS NULL;
`,
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
        `ALTER TABLE ${s}.task VALIDATE CONSTRAINT task_state_check;`,
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
