import type { SchemaMigration } from '../schema.sql';
import { workflowSignalCommittedSql } from '../runtime-functions';

/**
 * Migrations 17, 26, 27 and 28: durable workflows (see workflow/ and workflow.sql.ts). A workflow is a task whose
 * handler journals its steps; a parked one (sleeping, waiting for a signal or a child) is a task
 * in state `waiting` with `waiting_for` set. `s`: the quoted schema name. See schema.sql.ts for how
 * migrations are applied: new nullable columns and new tables (no rewrite, short locks), and the
 * index on the live table built CONCURRENTLY in a step of its own.
 */
export function workflowMigrations(s: string): SchemaMigration[] {
  return [
    {
      version: 17,
      name: 'workflows',
      sql: [
        `
-- A parked workflow: what it waits for ('sleep', 'signal:<name>', 'child:<id>'), until when (NULL:
-- no time bound), and whether something it may wait for happened while it ran (a child ended: the
-- next park then re-runs it at once instead of waiting). Fan-in dependants have waiting_for NULL.
ALTER TABLE ${s}.task
  ADD COLUMN IF NOT EXISTS wake_at timestamptz,
  ADD COLUMN IF NOT EXISTS waiting_for text,
  ADD COLUMN IF NOT EXISTS woken boolean;

-- The journal: one row per call of a workflow's context (seq: a position in call order). Written once (a signal
-- wait's or a child's row goes from 'waiting' to its outcome), read whole when an attempt starts.
CREATE TABLE IF NOT EXISTS ${s}.workflow_step (
  task_id      bigint      NOT NULL,
  seq          integer     NOT NULL,
  kind         text        NOT NULL CHECK (kind IN ('step', 'transaction', 'sleep', 'signal', 'enqueue', 'child', 'patch')),
  name         text        NOT NULL,
  outcome      text        NOT NULL CHECK (outcome IN ('ok', 'error', 'waiting')),
  result       jsonb,
  attempt      integer     NOT NULL,
  started_at   timestamptz,
  finished_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (task_id, seq)
);

-- Signals sent to a workflow, kept until a wait consumes them (in order of id, each once).
CREATE TABLE IF NOT EXISTS ${s}.workflow_signal (
  id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  task_id       bigint      NOT NULL,
  name          text        NOT NULL,
  payload       jsonb,
  consumed_seq  integer,
  created_at    timestamptz NOT NULL DEFAULT now()
);
-- Retention (maintain.sql.ts): journals and signals of tasks that ended, oldest first.
CREATE INDEX IF NOT EXISTS workflow_step_finished_idx ON ${s}.workflow_step (finished_at);
CREATE INDEX IF NOT EXISTS workflow_signal_pending_idx ON ${s}.workflow_signal (task_id, name, id) WHERE consumed_seq IS NULL;
CREATE INDEX IF NOT EXISTS workflow_signal_task_idx ON ${s}.workflow_signal (task_id);
`,
        {
          run: 'concurrently',
          sql: `
-- Parked workflows with a wake time, earliest first: the waker's only read (workflow.sql.ts). Not
-- in task_claim_idx (state 'pending' only): a parked workflow costs claims nothing.
CREATE INDEX IF NOT EXISTS task_wake_idx ON ${s}.task (wake_at) WHERE state = 'waiting' AND wake_at IS NOT NULL;
`,
        },
      ],
    },
    {
      version: 26,
      name: 'workflow_tentative_entries',
      sql: [
        `
-- Whether a journal entry stays when an attempt fails (see workflow.sql.ts forgetTentative): false
-- for a failed step or transaction and for the steps after such a failure in its attempt, until the
-- workflow next parks. A constant default: no table rewrite.
ALTER TABLE ${s}.workflow_step ADD COLUMN IF NOT EXISTS kept boolean NOT NULL DEFAULT true;
`,
      ],
    },
    {
      version: 27,
      name: 'workflow_signal_commit',
      sql: [
        `${workflowSignalCommittedSql(s)};
-- A signal wakes its workflow when its sender commits (see workflow_signal_committed in
-- runtime-functions.ts, which keeps the function's body up to date): a signal sent inside a long
-- business transaction no longer holds the signal lock, and a park no longer waits for it.
DROP TRIGGER IF EXISTS workflow_signal_committed ON ${s}.workflow_signal;
CREATE CONSTRAINT TRIGGER workflow_signal_committed AFTER INSERT ON ${s}.workflow_signal
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ${s}.workflow_signal_committed();
`,
      ],
    },
    {
      version: 28,
      name: 'workflow_child_link',
      sql: [
        `
-- A workflow's child names its parents here, not in dependants: instances of a release before 17,
-- during a rolling deploy, read dependants and would settle the child's end with their fan-in
-- statement (a done child left its parent waiting, a dead one cancelled it). They never read this.
-- Several parents: a child started with a key may be a live task another workflow started too.
ALTER TABLE ${s}.task ADD COLUMN IF NOT EXISTS workflow_parents bigint[];

-- A workflow child's end, left for its parent by the statement that ended it (the same debt as
-- task_dependency_debt's, in a table older instances do not know; settled by settleChildren in
-- workflow.sql.ts). A few rows, gone seconds after their insert.
CREATE TABLE IF NOT EXISTS ${s}.workflow_child_debt (
  id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  parent   bigint NOT NULL,
  child    bigint NOT NULL,
  outcome  text   NOT NULL CHECK (outcome IN ('done', 'dead', 'cancelled')),
  result   jsonb
);
`,
        {
          run: 'concurrently',
          sql: `
-- Journal entries of children not yet ended: what a rescuer pass reads to find children an older
-- instance ended (it records no debt); see sweepChildEnds in workflow.sql.ts.
CREATE INDEX IF NOT EXISTS workflow_step_child_waiting_idx ON ${s}.workflow_step (task_id) WHERE kind = 'child' AND outcome = 'waiting';
`,
        },
      ],
    },
  ];
}
