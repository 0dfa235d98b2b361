import { marked } from './fragments.sql';
import { quoteIdent } from './identifiers';

/** Read-only queries for operators and dashboards (the seed article's monitoring queries). */
export function inspectStatements(schema: string) {
  const s = quoteIdent(schema);
  const columns = `id::text AS id, queue, state, payload, priority, run_at, attempt, max_attempts, last_error,
       parent_id::text AS parent_id, dedup_key, group_key, created_at, started_at, finished_at`;
  const both = (where: string) => `
SELECT ${columns}, locked_by, locked_until FROM ${s}.task WHERE ${where}
UNION ALL
SELECT ${columns}, NULL, NULL FROM ${s}.task_archive WHERE ${where}`;
  return marked({
    /** Counts by queue and state over the hot table and the archive; oldest due pending age. */
    stats: `
SELECT queue, state, count(*)::int AS count,
       (extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'pending' AND run_at <= now())) * 1000)::float8
         AS oldest_pending_ms
FROM ${s}.task GROUP BY queue, state
UNION ALL
SELECT queue, state, count(*)::int, NULL FROM ${s}.task_archive GROUP BY queue, state`,

    /** One task wherever it lives. Parameters: $1 id. */
    get: both('id = $1::bigint'),

    /**
     * A page of tasks, newest first, by keyset on id. Parameters: $1 queue or NULL, $2 state or
     * NULL, $3 id cursor (exclusive) or NULL, $4 limit.
     */
    list: `
SELECT * FROM (${both('($1::text IS NULL OR queue = $1::text) AND ($2::text IS NULL OR state = $2::text) AND ($3::bigint IS NULL OR id < $3::bigint)')}
) page ORDER BY id::bigint DESC LIMIT $4`,

    /**
     * A whole pipeline: walk up parent_id to the root, then down to every descendant, by index
     * lookups in both tables (task_parent_idx, task_archive_parent_idx). Depth is capped at 100.
     * Parameters: $1 id.
     */
    chain: `
WITH RECURSIVE up AS (
  SELECT $1::bigint AS id, 0 AS depth
  UNION ALL
  SELECT p.parent_id, up.depth + 1
  FROM up CROSS JOIN LATERAL (
    SELECT parent_id FROM ${s}.task WHERE id = up.id
    UNION ALL SELECT parent_id FROM ${s}.task_archive WHERE id = up.id
  ) p
  WHERE p.parent_id IS NOT NULL AND up.depth < 100
), down AS (
  SELECT id, 0 AS stage FROM (SELECT id FROM up ORDER BY depth DESC LIMIT 1) root
  UNION ALL
  SELECT c.id, down.stage + 1
  FROM down CROSS JOIN LATERAL (
    SELECT id FROM ${s}.task WHERE parent_id = down.id
    UNION ALL SELECT id FROM ${s}.task_archive WHERE parent_id = down.id
  ) c
  WHERE down.stage < 100
)
SELECT d.stage, x.*
FROM down d CROSS JOIN LATERAL (${both('id = d.id')}) x
ORDER BY d.stage, d.id`,

    /** The seed's `select error_text, count(*) ... group by 1`: failing and dead tasks by error. Parameters: $1 queue, $2 limit. */
    topErrors: `
SELECT last_error AS error, count(*)::int AS count,
       count(*) FILTER (WHERE state = 'dead')::int AS dead, max(finished_at) AS last_seen
FROM ${s}.task
WHERE queue = $1 AND last_error IS NOT NULL AND state IN ('pending', 'dead')
GROUP BY last_error ORDER BY count(*) DESC, max(finished_at) DESC LIMIT $2`,

    /**
     * The seed's per-hour statistics over finished tasks: count, total and mean run time.
     * Parameters: $1 queue or NULL, $2 since.
     */
    hourly: `
SELECT date_trunc('hour', finished_at) AS hour, queue, count(*)::int AS done,
       (extract(epoch FROM sum(finished_at - started_at)) * 1000)::float8 AS total_ms,
       (extract(epoch FROM avg(finished_at - started_at)) * 1000)::float8 AS avg_ms
FROM ${s}.task_archive
WHERE state = 'done' AND finished_at >= $2 AND ($1::text IS NULL OR queue = $1::text)
GROUP BY 1, 2 ORDER BY 1, 2`,
  });
}
