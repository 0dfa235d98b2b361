import { marked } from './fragments.sql';
import { liveQueues, oldestDueAndHandlers, pipelineWalk, unhandledMs } from './inspect.fragments';
import { quoteIdent } from './identifiers';
import { dashboardShown, dashboardStored } from './task-fields';

/**
 * What the dashboard reads. Every read of history is bounded by an index range, a time window
 * or a LIMIT (the numbers are parameters, set in dashboard.repository.ts), so a page costs about
 * the same with a million archived tasks as with a hundred:
 * - the overview counts hot-table rows through the partial indexes, each count capped;
 * - its last-hour figures read at most a sample of the newest archived rows (task_archive_finished_idx)
 *   and, per queue, the tasks that died or failed in the hour (task_dead_idx, task_retrying_idx);
 * - the task list reads live tasks by queue and state (the task table holds unfinished work
 *   only), and at most a budget of rows per table for the filters no index serves (and for every
 *   filter on the archive), newest first;
 * - a task, its pipeline and the schedules are primary-key or small-table reads.
 */
export function dashboardStatements(schema: string) {
  const s = quoteIdent(schema);
  const since = (param: string) => `now() - ${param} * interval '1 millisecond'`;
  /** Counts the rows of a subquery up to the cap in $1: past it, counting would read them all. */
  const capped = (from: string) => `(SELECT count(*) FROM (SELECT 1 FROM ${from} LIMIT $1) c)::int`;
  /** A loose index scan: one probe per distinct queue among the rows of `state` (its partial index leads with queue). */
  /** The list's filters on one table's candidate rows (a clause on parameters alone is checked once). */
  const listFilter = `($1::text IS NULL OR c.queue = $1::text) AND ($2::text IS NULL OR c.state = $2::text)
    AND ($3::text IS NULL OR c.dedup_key = $3::text) AND ($4::text IS NULL OR c.group_key = $4::text)
    AND ($5::text IS NULL OR strpos(lower(c.last_error), lower($5::text)) > 0) AND ($9::text IS NULL OR $9::text = ANY (c.tags))`;
  /** Whether key, group, error text or tag is filtered: the filters no index serves. */
  const scanning = `coalesce($3, $4, $5, $9) IS NOT NULL`;
  // A task's page: its payload pretty-printed by the database.
  const pageShown = dashboardShown('page', { payload: (e) => `jsonb_pretty(${e})` });
  const summary = `id::text AS id, queue, state, parent_id::text AS "parentId", attempt,
         created_at AS "createdAt", started_at AS "startedAt", finished_at AS "finishedAt"`;
  return marked({
    /**
     * Per queue, from the hot table: tasks due, waiting for a later run_at, waiting for their
     * dependencies, running and dead (each counted up to $1), and the age of the oldest due task.
     * Queues are found by loose index scans of the pending (task_due_idx), dead (task_dead_idx) and
     * waiting (task_waiting_idx) rows; running rows are few (leases) and
     * read whole from their partial index. Due and later are the two sides of now() in task_due_idx.
     * With the running instances handling each queue and how long it has had due tasks and none
     * (see unhandledMs), from the few rows of queue_handler.
     * Parameters: $1 count cap.
     */
    queues: `
WITH RECURSIVE ${liveQueues(s)}
SELECT q.queue,
       ${capped(`${s}.task t WHERE t.queue = q.queue AND t.state = 'pending' AND t.run_at <= now()`)} AS due,
       ${capped(`${s}.task t WHERE t.queue = q.queue AND t.state = 'pending' AND t.run_at > now()`)} AS later,
       ${capped(`${s}.task t WHERE t.queue = q.queue AND t.state = 'waiting'`)} AS waiting,
       coalesce((SELECT r.running FROM running r WHERE r.queue = q.queue), 0) AS running,
       ${capped(`${s}.task t WHERE t.queue = q.queue AND t.state = 'dead'`)} AS dead,
       (extract(epoch FROM now() - o.run_at) * 1000)::float8 AS "oldestDueMs",
       h.live AS handlers, ${unhandledMs('h', 'o.run_at')} AS "unhandledMs"
FROM queues q
${oldestDueAndHandlers(s)}
ORDER BY q.queue`,

    /**
     * The last $2 ms, in one pass and two groupings: per queue (done, cancelled, failed attempts,
     * run-time p50/p95) and per minute (the chart, `minutesAgo` 0 = this minute). Finished tasks
     * are the newest $3 archived rows of the window (a backward scan of task_archive_finished_idx
     * that stops at the window's start or at $3 rows: `sampledFrom` says where it stopped when it
     * was the cap). Attempts are not stored one by one, so failed attempts are counted from the
     * task rows, each at the minute its task last changed: a finished task's attempts before its
     * last, every attempt of a task that died (task_dead_idx), and every attempt so far of a task
     * waiting for its retry (task_retrying_idx), at most $3 tasks of each kind per queue.
     * Parameters: $1 queue[] (from `queues`), $2 window ms, $3 row cap.
     */
    recent: `
WITH finished AS (
  SELECT queue, state, finished_at, greatest(attempt - 1, 0) AS failures,
         (extract(epoch FROM finished_at - started_at) * 1000)::float8 AS run_ms
  FROM ${s}.task_archive
  WHERE finished_at > ${since('$2')}
  ORDER BY finished_at DESC LIMIT $3
), failing AS (
  SELECT q.queue, f.finished_at, f.attempt
  FROM unnest($1::text[]) AS q(queue) CROSS JOIN LATERAL (
    (SELECT t.finished_at, t.attempt FROM ${s}.task t
     WHERE t.queue = q.queue AND t.state = 'dead' AND t.finished_at > ${since('$2')} LIMIT $3)
    UNION ALL
    (SELECT t.finished_at, t.attempt FROM ${s}.task t
     WHERE t.queue = q.queue AND t.state = 'pending' AND t.last_error IS NOT NULL AND t.finished_at > ${since('$2')} LIMIT $3)
  ) f
), events AS (
  SELECT queue, state AS kind, finished_at, failures, run_ms FROM finished
  UNION ALL
  SELECT queue, 'failing', finished_at, attempt, NULL FROM failing
), bucketed AS (
  SELECT *, least(greatest(floor(extract(epoch FROM now() - finished_at) / 60)::int, 0), 59) AS minutes_ago FROM events
)
SELECT queue, minutes_ago AS "minutesAgo",
       count(*) FILTER (WHERE kind = 'done')::int AS done,
       count(*) FILTER (WHERE kind = 'cancelled')::int AS cancelled,
       coalesce(sum(failures), 0)::int AS failed,
       (percentile_cont(0.5) WITHIN GROUP (ORDER BY run_ms) FILTER (WHERE kind = 'done'))::float8 AS "p50Ms",
       (percentile_cont(0.95) WITHIN GROUP (ORDER BY run_ms) FILTER (WHERE kind = 'done'))::float8 AS "p95Ms",
       (SELECT CASE WHEN count(*) = $3 THEN min(finished_at) END FROM finished) AS "sampledFrom"
FROM bucketed
GROUP BY GROUPING SETS ((queue), (minutes_ago))`,

    /**
     * A page of tasks, newest first, filtered by queue, state, dedup key, group, error text
     * (case-insensitive substring) and tag. Each table gives its newest candidates below the cursor, and
     * the two are merged:
     * - live tasks (`task`, bounded by the work not yet finished) are read with the queue and state
     *   filters applied, by a backward scan of the primary key;
     * - the archive (all history) is read without them, so that a rare queue cannot make a page
     *   read it to the end.
     * Where a filter is left for after the read (key, group, error text and tag in both, every filter in
     * the archive), a table gives at most $8 rows (the scan budget) instead of a page. `low` is the
     * id down to which both tables were read when a budget ran out: rows below it were not looked
     * at, so the page keeps only matches at or above it and the next page starts there. The bound
     * row always comes back; with no match its page columns are NULL.
     * Parameters: $1 queue, $2 state, $3 key, $4 group, $5 error text (each or NULL), $6 id cursor
     * (exclusive) or NULL, $7 page size, $8 scan budget, $9 tag or NULL. Returns up to $7 + 1 rows (one more says
     * there is a next page).
     */
    tasks: `
WITH hot AS (
  SELECT ${dashboardStored('list', 'task')} FROM ${s}.task
  WHERE ($2::text IS NULL OR $2::text IN ('pending', 'waiting', 'running', 'dead', 'cancelled'))
    AND ($1::text IS NULL OR queue = $1::text) AND ($2::text IS NULL OR state = $2::text)
    AND id < coalesce($6::bigint, 9223372036854775807)
  ORDER BY id DESC LIMIT CASE WHEN ${scanning} THEN $8 ELSE $7 + 1 END
), archived AS (
  SELECT ${dashboardStored('list', 'task_archive')} FROM ${s}.task_archive
  WHERE ($2::text IS NULL OR $2::text IN ('done', 'cancelled')) AND id < coalesce($6::bigint, 9223372036854775807)
  ORDER BY id DESC LIMIT CASE WHEN coalesce($1, $2, $3, $4, $5, $9) IS NULL THEN $7 + 1 ELSE $8 END
), bound AS (
  SELECT greatest(
    (SELECT min(id) FROM hot HAVING count(*) = $8 AND ${scanning}),
    (SELECT min(id) FROM archived HAVING count(*) = $8 AND coalesce($1, $2, $3, $4, $5, $9) IS NOT NULL)) AS low
), page AS (
  SELECT * FROM (
    SELECT c.*, 'task' AS source FROM hot c WHERE ${listFilter}
    UNION ALL
    SELECT c.*, 'archive' FROM archived c WHERE ${listFilter}
  ) m
  WHERE m.id >= coalesce((SELECT low FROM bound), 0)
  ORDER BY m.id DESC LIMIT $7 + 1
)
SELECT b.low::text AS low, ${dashboardShown('list', { last_error: (e) => `left(${e}, 300)` })}, p.source
FROM bound b LEFT JOIN page p ON true
ORDER BY p.id DESC`,

    /**
     * One task wherever it lives, with what the detail page shows: its payload pretty-printed by
     * the database, the attempt limit in force, its lease and whether a cancel was requested.
     * Parameters: $1 id.
     */
    task: `
SELECT 'task' AS source, ${pageShown}, EXISTS (SELECT 1 FROM ${s}.task_cancel c WHERE c.task_id = t.id) AS "cancelRequested"
FROM (SELECT ${dashboardStored('page', 'task')} FROM ${s}.task WHERE id = $1::bigint) t
UNION ALL
SELECT 'archive', ${pageShown}, false
FROM (SELECT ${dashboardStored('page', 'task_archive')} FROM ${s}.task_archive WHERE id = $1::bigint) t`,

    /**
     * The pipeline a task belongs to, for its picture: up parent_id to the root, then down to the
     * descendants, breadth first, by index lookups in both tables (task_parent_idx,
     * task_archive_parent_idx). Depth is capped at 100 and the walk down stops after $2 tasks (a
     * recursive CTE is only evaluated as far as it is read; the sort comes after the cap).
     * Parameters: $1 id, $2 most tasks.
     */
    chain: `
WITH RECURSIVE ${pipelineWalk(s)}, walked AS (
  SELECT id, min(stage) AS stage FROM (SELECT id, stage FROM down LIMIT $2) d GROUP BY id
)
SELECT w.stage, x.*
FROM walked w CROSS JOIN LATERAL (
  SELECT ${summary} FROM ${s}.task WHERE id = w.id
  UNION ALL
  SELECT ${summary} FROM ${s}.task_archive WHERE id = w.id
) x
ORDER BY w.stage, w.id`,

    /**
     * Every schedule, declared (`schedule`) and runtime (`schedule_runtime`): small tables, one row
     * per schedule; by name. Parameters: $1 most rows.
     */
    schedules: `
SELECT name, queue, cron, every_ms::float8 AS "everyMs", tz, missed, next_run_at AS "nextRunAt",
       last_run_at AS "lastRunAt", now() AS "dbNow", false AS runtime
FROM ${s}.schedule
UNION ALL
SELECT name, queue, cron, every_ms::float8, tz, missed, next_run_at, last_run_at, now(), true
FROM ${s}.schedule_runtime
ORDER BY name, runtime LIMIT $1`,
  });
}
