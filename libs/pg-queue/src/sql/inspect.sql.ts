import { quoteIdent } from './identifiers';

/** Read-only queries for operators and dashboards (the seed article's monitoring queries). */
export function inspectStatements(schema: string) {
  const s = quoteIdent(schema);
  return {
    /** Counts by queue and state over the hot table and the archive; oldest due pending age. */
    stats: `
SELECT queue, state, count(*)::int AS count,
       (extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'pending' AND run_at <= now())) * 1000)::float8
         AS oldest_pending_ms
FROM ${s}.task GROUP BY queue, state
UNION ALL
SELECT queue, state, count(*)::int, NULL FROM ${s}.task_archive GROUP BY queue, state`,

    /** One task wherever it lives. Parameters: $1 id. */
    get: `
SELECT id::text AS id, queue, state, payload, priority, run_at, attempt, max_attempts, last_error,
       locked_by, locked_until, parent_id::text AS parent_id, created_at, started_at, finished_at
FROM ${s}.task WHERE id = $1::bigint
UNION ALL
SELECT id::text, queue, state, payload, priority, run_at, attempt, max_attempts, last_error,
       NULL, NULL, parent_id::text, created_at, started_at, finished_at
FROM ${s}.task_archive WHERE id = $1::bigint`,
  };
}
