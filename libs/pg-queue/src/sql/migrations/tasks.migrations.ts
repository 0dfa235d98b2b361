import type { SchemaMigration } from '../schema.sql';

/**
 * Migrations 1-5: the task tables, keys, groups, cancel requests, schedules, fencing, per-handler settings and trace context.
 * `s`: the quoted schema name. See schema.sql.ts for how migrations are applied.
 */
export function taskMigrations(s: string): SchemaMigration[] {
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
      // The index builds on task in steps of their own, CONCURRENTLY on an upgrade.
      sql: [
        `
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
        {
          run: 'concurrently',
          sql: `
CREATE UNIQUE INDEX IF NOT EXISTS task_dedup_idx ON ${s}.task (queue, dedup_key)
  WHERE dedup_key IS NOT NULL AND state IN ('pending', 'running');
`,
        },
        {
          run: 'concurrently',
          sql: `
-- Per-group FIFO: "is there an earlier or running task of this group?" is an index probe.
CREATE INDEX IF NOT EXISTS task_group_idx ON ${s}.task (queue, group_key, id)
  WHERE group_key IS NOT NULL AND state IN ('pending', 'running');
`,
        },
      ],
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
        { sql: `ALTER TABLE ${s}.task VALIDATE CONSTRAINT task_lease_token_check;`, run: 'long' },
      ],
    },
    {
      version: 4,
      name: 'settings_where_tasks_run',
      // Steps, so no lock outlives its step: the first changes only the catalog; the index builds and
      // the drop run CONCURRENTLY on an upgrade (from printed SQL, on a large queue table, build them
      // CONCURRENTLY by hand first: the steps then find them, IF NOT EXISTS).
      sql: [
        `
-- The handler that runs a task governs its attempts (docs/design.md, "Where settings live"): max_attempts is only the
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
        {
          run: 'concurrently',
          sql: `
-- Due times by queue: when the next delayed task or retry of a queue is due (the worker sets its
-- timer from it), and whether anything is due at all, in one index probe however many tasks wait
-- for a later time (task_claim_idx orders by priority first and cannot answer either).
CREATE INDEX IF NOT EXISTS task_due_idx ON ${s}.task (queue, run_at) WHERE state = 'pending';
`,
        },
        {
          run: 'concurrently',
          sql: `
-- Per-group FIFO by place in the group: only a group's first task may run (see claim.sql.ts).
CREATE INDEX IF NOT EXISTS task_group_pos_idx ON ${s}.task (queue, group_key, (coalesce(group_pos, id)))
  WHERE group_key IS NOT NULL AND state IN ('pending', 'running');
`,
        },
        { sql: `DROP INDEX IF EXISTS ${s}.task_group_idx;`, run: 'concurrently' },
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
      version: 29,
      name: 'task_tags',
      // Catalog changes only (nullable, no default). An instance of an earlier release writes no
      // tags and archives a task without them; this one reads NULL as no tags.
      sql: `
-- The enqueue option tags: labels to find tasks by (the dashboard's tag filter).
ALTER TABLE ${s}.task ADD COLUMN IF NOT EXISTS tags text[];
ALTER TABLE ${s}.task_archive ADD COLUMN IF NOT EXISTS tags text[];
`,
    },
  ];
}
