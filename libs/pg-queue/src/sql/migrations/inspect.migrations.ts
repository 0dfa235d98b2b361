import type { SchemaMigration } from '../schema.sql';

/**
 * Migration 12: what inspection needs. `s`: the quoted schema name. See schema.sql.ts for how
 * migrations are applied.
 */
export function inspectMigrations(s: string): SchemaMigration[] {
  return [
    {
      version: 12,
      name: 'waiting_index',
      sql: [
        {
          run: 'concurrently',
          sql: `
-- Tasks waiting for their dependencies, by queue: the metrics scrape, the dashboard's overview and
-- the health check list and count them (loose index scan, capped counts) without reading pending
-- rows. Only dependants enter it, while they wait.
CREATE INDEX IF NOT EXISTS task_waiting_idx ON ${s}.task (queue) WHERE state = 'waiting';
`,
        },
      ],
    },
  ];
}
