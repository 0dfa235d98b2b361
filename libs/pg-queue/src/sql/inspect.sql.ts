import { queueBackedOff } from './backoff.sql';
import { marked } from './fragments.sql';
import { liveQueues, oldestDueAndHandlers, pipelineWalk, unhandledMs } from './inspect.fragments';
import { quoteIdent } from './identifiers';
import { taskRowColumns } from './task-fields';
import { journalJson } from './workflow.sql';

/**
 * The most due or dead tasks per queue that the metrics scrape counts: past it, counting would cost
 * a read per task on every scrape of every instance. The oldest due age shows how far behind a
 * queue is beyond that.
 */
export const METRICS_COUNT_CAP = 10_000;

/** Read-only queries for operators and dashboards (the seed article's monitoring queries). */
export function inspectStatements(schema: string) {
  const s = quoteIdent(schema);
  // For one task or a chain (not list): a workflow's journal, and what it waits for while parked.
  const workflowOf = (table: string) => table === 'task'
    ? `CASE WHEN state = 'waiting' THEN waiting_for END AS waiting_for, CASE WHEN state = 'waiting' THEN wake_at END AS wake_at, ${journalJson(schema, 'task.id')} AS journal`
    : `NULL, NULL, ${journalJson(schema, 'task_archive.id')}`;
  /** list's filter for one table, given the states it holds (a clause on parameters alone is
   * checked once, before the scan). */
  const pageOf = (states: string) => `($2::text IS NULL OR $2::text IN ${states})
     AND ($1::text IS NULL OR queue = $1::text) AND ($2::text IS NULL OR state = $2::text)
     AND id <= coalesce($3::bigint - 1, 9223372036854775807)`;
  // A task's columns (task-fields.ts) from either table.
  const both = (where: string) => `
SELECT ${taskRowColumns('task')}, ${workflowOf('task')} FROM ${s}.task WHERE ${where}
UNION ALL
SELECT ${taskRowColumns('task_archive')}, ${workflowOf('task_archive')} FROM ${s}.task_archive WHERE ${where}`;
  return marked({
    /**
     * Exact counts by queue and state over the hot table and the archive; oldest due pending age.
     * Reads every row of both: for operators, not for periodic scrapes (see `metrics`).
     */
    stats: `
SELECT queue, state, count(*)::int AS count,
       (extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'pending' AND run_at <= now())) * 1000)::float8
         AS oldest_due_ms
FROM ${s}.task GROUP BY queue, state
UNION ALL
SELECT queue, state, count(*)::int, NULL FROM ${s}.task_archive GROUP BY queue, state`,

    /**
     * What a metrics scrape reads, at a cost that does not grow with the archive or with tasks
     * waiting for a later run_at: per queue, due, dead and waiting (for dependencies) tasks (each
     * counted up to METRICS_COUNT_CAP; waiting ones by task_waiting_idx), running tasks, and the
     * age of the oldest due task. Never reads
     * task_archive. Queues are enumerated by a loose index scan (one probe per queue) of the
     * pending rows (task_due_idx) and the dead rows (task_dead_idx); running rows are few (leases)
     * and read whole from task_running_idx. The due figures are range scans of task_due_idx
     * (queue, run_at <= now()), which never reach the not-yet-due rows. With, per queue, the
     * running instances that handle it and how long it has had due tasks and none (see
     * unhandledMs), from the few rows of queue_handler. And whether it is paused, as a whole or in
     * some partitions (queue_pause, a few rows): a paused queue is listed even without live tasks.
     * And whether it is backed off as a whole, or through its limiter (backoff.sql.ts, a few rows).
     */
    /**
     * What the server accepts, for the connection budget checked when workers start (see
     * connection.budget.ts). No parameters.
     */
    connectionLimits: `
SELECT (current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int) AS server_max,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int AS server_in_use`,

    metrics: `
WITH RECURSIVE ${liveQueues(s)}
SELECT q.queue,
       (SELECT count(*) FROM (
          SELECT 1 FROM ${s}.task t WHERE t.queue = q.queue AND t.state = 'pending' AND t.run_at <= now() LIMIT ${METRICS_COUNT_CAP}
        ) due)::int AS due,
       coalesce((SELECT r.running FROM running r WHERE r.queue = q.queue), 0) AS running,
       (SELECT count(*) FROM (
          SELECT 1 FROM ${s}.task t WHERE t.queue = q.queue AND t.state = 'dead' LIMIT ${METRICS_COUNT_CAP}
        ) dead)::int AS dead,
       (SELECT count(*) FROM (
          SELECT 1 FROM ${s}.task t WHERE t.queue = q.queue AND t.state = 'waiting' LIMIT ${METRICS_COUNT_CAP}
        ) waiting)::int AS waiting,
       (extract(epoch FROM now() - o.run_at) * 1000)::float8 AS oldest_due_ms,
       h.live AS handlers, ${unhandledMs('h', 'o.run_at')} AS unhandled_ms,
       EXISTS (SELECT 1 FROM ${s}.queue_pause p WHERE p.queue = q.queue AND p.partition_key = '') AS paused,
       (SELECT count(*) FROM ${s}.queue_pause p WHERE p.queue = q.queue AND p.partition_key <> '')::int AS paused_partitions,
       ${queueBackedOff(s, 'q.queue')} AS backed_off
FROM (SELECT queue FROM queues UNION SELECT queue FROM ${s}.queue_pause) q
${oldestDueAndHandlers(s)}
ORDER BY q.queue`,

    /** One task wherever it lives. Parameters: $1 id. */
    get: both('id = $1::bigint'),

    /**
     * A page of tasks, newest first, by keyset on id. Each table gives its own newest page by a
     * backward scan of its primary key, and the two pages are merged: sorting both tables' matching
     * rows would read every one of them. The cursor is an index bound even in a
     * generic plan, and a state that lives in one table only does not scan the other. A filter
     * that few of the newest tasks match still walks back until the page is full.
     * Parameters: $1 queue or NULL, $2 state or NULL, $3 id cursor (exclusive) or NULL, $4 limit.
     */
    list: `
SELECT * FROM (
  (SELECT ${taskRowColumns('task')} FROM ${s}.task
   WHERE ${pageOf("('pending', 'waiting', 'running', 'dead', 'cancelled')")} ORDER BY task.id DESC LIMIT $4)
  UNION ALL
  (SELECT ${taskRowColumns('task_archive')} FROM ${s}.task_archive
   WHERE ${pageOf("('done', 'cancelled')")} ORDER BY task_archive.id DESC LIMIT $4)
) page ORDER BY page.id::bigint DESC LIMIT $4`,

    /**
     * A whole pipeline or dependency graph (see pipelineWalk), each task once, at the first stage
     * it was reached. Depth is capped at 100. Parameters: $1 id.
     */
    chain: `
WITH RECURSIVE ${pipelineWalk(s)}
SELECT d.stage, x.*
FROM (SELECT id, min(stage) AS stage FROM down GROUP BY id) d CROSS JOIN LATERAL (${both('id = d.id')}) x
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
