import type { SchemaMigration } from '../schema.sql';

/**
 * Migration 24: weighted partitions (see the partitioned claim in claim.sql.ts).
 * `s`: the quoted schema name. A column with a constant default and a new table: catalog changes
 * only. During a rolling deploy an older instance neither reads nor writes them: its partitioned
 * claims take partitions in plain turns (weight 1 each) and leave `partition_turns` as it was, so
 * a claim of this version after one of theirs may give the cursor's partition a turn more.
 */
export function fairnessMigrations(s: string): SchemaMigration[] {
  return [
    {
      version: 24,
      name: 'partition_weights',
      sql: `
-- The turns the cursor's partition has left in its visit of the round (a partition of weight w
-- gets w turns a visit): a claim that stopped part-way through them resumes it first.
ALTER TABLE ${s}.queue_state ADD COLUMN IF NOT EXISTS partition_turns integer NOT NULL DEFAULT 0;
-- A partition's weight as the latest enqueue that gave one set it (the enqueue option weight);
-- read by primary key for each partition a round visits, over the module's partitionWeights.
CREATE TABLE IF NOT EXISTS ${s}.partition_weight (
  queue          text        NOT NULL,
  partition_key  text        NOT NULL,
  weight         integer     NOT NULL CHECK (weight BETWEEN 1 AND 1000),
  updated_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (queue, partition_key)
);
`,
    },
  ];
}
