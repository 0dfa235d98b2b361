import type { SchemaMigration } from '../schema.sql';

/**
 * Migration 18: paused queues and partitions (see pause.sql.ts). `s`: the quoted schema name. A new
 * table, so a plain step (see schema.sql.ts for how migrations are applied).
 */
export function pauseMigrations(s: string): SchemaMigration[] {
  return [
    {
      version: 18,
      name: 'queue_pause',
      sql: `
-- One row per paused queue (partition_key '': the whole queue; a partition key is never '') or
-- paused partition of a queue. Every claim reads it (a primary-key probe, see claim.sql.ts), so it
-- stays tiny: a row lives only while its pause does.
CREATE TABLE IF NOT EXISTS ${s}.queue_pause (
  queue          text        NOT NULL,
  partition_key  text        NOT NULL DEFAULT '',
  paused_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (queue, partition_key)
);
`,
    },
  ];
}
