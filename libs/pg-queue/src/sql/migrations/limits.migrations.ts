import type { SchemaMigration } from '../schema.sql';

/**
 * Migrations 15-16 of flow control (after 6-10 in flow.migrations.ts).
 *
 * Migration 15: rate windows kept as a few numbers whatever the limit's `max`, instead of one
 * timestamp per claim (rate-window.sql.ts). `s`: the quoted schema name. See schema.sql.ts for how
 * migrations are applied: columns with a constant default and a new table, catalog changes only
 * (the installer bounds each lock wait and retries).
 *
 * During a rolling deploy an instance of an older version goes on using the old columns
 * (queue_state.rate_starts, partition_rate.starts): it never reads nor writes the new state, and
 * this version never reads nor writes the old. So while both versions claim from a rate-limited
 * queue, each holds the limit over its own claims only, and a window may see up to `max` claims
 * from each. The old columns are left for those instances; nothing writes them once they are gone,
 * and the pruner deletes partition_rate's rows as their starts leave the window.
 */
export function limitMigrations(s: string): SchemaMigration[] {
  return [
    {
      version: 15,
      name: 'compact_rate_windows',
      sql: `
-- A rate window per queue (queue_state) and per queue and partition (rate_window; '' for tasks
-- without a partition): per step of the window with claims in it, the time of its latest claim
-- (ascending) and how many it made. At most 21 entries a row. rate_window.window_ms lets the
-- pruner drop a row whose entries have all left the window.
ALTER TABLE ${s}.queue_state
  ADD COLUMN IF NOT EXISTS rate_at timestamptz[] NOT NULL DEFAULT '{}',
  ADD COLUMN IF NOT EXISTS rate_n  integer[]     NOT NULL DEFAULT '{}';
CREATE TABLE IF NOT EXISTS ${s}.rate_window (
  queue          text          NOT NULL,
  partition_key  text          NOT NULL,
  window_ms      bigint        NOT NULL,
  rate_at        timestamptz[] NOT NULL,
  rate_n         integer[]     NOT NULL,
  PRIMARY KEY (queue, partition_key)
);
`,
    },
    {
      version: 16,
      name: 'room_wanted',
      // During a rolling deploy an older instance neither reads nor writes the column (its claims
      // insert queue_state rows with the default); it announces every ending of its own, in the
      // payload it always used, and ignores this version's '!room <queue>' notices: a claim of it
      // that a limit cut short waits for its own next ending, a new task or its poll.
      sql: `
-- Set by a limited claim that a concurrency rule cut short while tasks were due (an instance waits
-- for room), cleared by the claim that announces room it left (limits.sql.ts): freed room is
-- announced only when someone may want it. Catalog change only.
ALTER TABLE ${s}.queue_state ADD COLUMN IF NOT EXISTS room_wanted boolean NOT NULL DEFAULT false;
`,
    },
  ];
}
