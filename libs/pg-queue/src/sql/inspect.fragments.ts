/** SQL fragments of the inspection statements (metrics, stats, dashboard, pipeline walks), apart from the hot path's (fragments.sql.ts). */

/**
 * Every queue with live tasks, as CTE `queues` (queue) with `running` (queue, running): queues with
 * pending, dead or waiting rows come from loose index scans (one probe per queue, task_due_idx,
 * task_dead_idx and task_waiting_idx), running rows are few and read whole (task_running_idx). No archive, no walk over
 * a queue's rows: what a scrape or the overview may run often.
 */
export function liveQueues(s: string): string {
  const queuesIn = (name: string, state: string) => queuesWith(s, name, state);
  return `${queuesIn('pending_queues', 'pending')}, ${queuesIn('dead_queues', 'dead')}, ${queuesIn('waiting_queues', 'waiting')}, running AS (
  SELECT queue, count(*)::int AS running FROM ${s}.task WHERE state = 'running' GROUP BY queue
), queues AS (
  SELECT queue FROM pending_queues WHERE queue IS NOT NULL
  UNION SELECT queue FROM dead_queues WHERE queue IS NOT NULL
  UNION SELECT queue FROM waiting_queues WHERE queue IS NOT NULL
  UNION SELECT queue FROM running
)`;
}

/**
 * CTE `name` (queue): each queue with rows in `state`, by a loose index scan of that state's partial
 * index (one probe per queue); its last row is NULL. Needs WITH RECURSIVE.
 */
export function queuesWith(s: string, name: string, state: string): string {
  return `${name} AS (
  (SELECT queue FROM ${s}.task WHERE state = '${state}' ORDER BY queue LIMIT 1)
  UNION ALL
  SELECT (SELECT t.queue FROM ${s}.task t WHERE t.state = '${state}' AND t.queue > p.queue ORDER BY t.queue LIMIT 1)
  FROM ${name} p WHERE p.queue IS NOT NULL
)`;
}

/**
 * Who handles queue `queue` (an SQL expression), as a LATERAL subquery of one row (`live`: running
 * instances whose row in queue_handler has not expired; `gone_at`: when the last one's expired, or
 * NULL), by the primary key of queue_handler (a few rows per queue).
 */
export function queueHandlers(s: string, queue: string): string {
  return `(SELECT count(*) FILTER (WHERE h.expires_at > now())::int AS live, max(h.expires_at) AS gone_at
   FROM ${s}.queue_handler h WHERE h.queue = ${queue})`;
}

/**
 * Joins, for each queue `q` of a FROM list, `o` (run_at: its oldest due task's, or NULL) and `h`
 * (see queueHandlers): what oldest-due ages and unhandledMs('h', 'o.run_at') read. The oldest due
 * task is the first entry of task_due_idx (queue, run_at <= now()).
 */
export function oldestDueAndHandlers(s: string): string {
  return `CROSS JOIN LATERAL (
  SELECT min(t.run_at) AS run_at FROM ${s}.task t WHERE t.queue = q.queue AND t.state = 'pending' AND t.run_at <= now()
) o
CROSS JOIN LATERAL ${queueHandlers(s, 'q.queue')} h`;
}

/**
 * How long a queue with due tasks has had no live handler, in ms (NULL when it has one or nothing is
 * due): since its oldest due task became due, or since its last handler's row expired if later.
 * A handler's row is kept a day after it expired: past that, since the oldest due task.
 * `handlers`: the alias of queueHandlers; `oldestDue`: the oldest due task's run_at.
 */
export function unhandledMs(handlers: string, oldestDue: string): string {
  return `CASE WHEN ${handlers}.live = 0 AND ${oldestDue} IS NOT NULL
            THEN (extract(epoch FROM now() - greatest(${oldestDue}, ${handlers}.gone_at)) * 1000)::float8 END`;
}

/**
 * The graph of task $1 as CTEs `up`, `roots` and `down` (id, stage): up its parent_id and
 * depends_on edges to the tasks that have neither (the roots), then down from every root to its
 * children (parent_id, by task_parent_idx and task_archive_parent_idx) and dependants (the
 * `dependants` list of each row), breadth first. A task reached along several paths (fan-in)
 * appears once per path: callers keep its first stage. Depth is capped at 100; a recursive CTE
 * is only evaluated as far as it is read, so a LIMIT on `down` stops the walk.
 */
export function pipelineWalk(s: string): string {
  const edgesUp = (table: string) => `SELECT unnest(parent_id || coalesce(depends_on, '{}')) FROM ${s}.${table} WHERE id = up.id`;
  // A scalar subquery, probed by primary key for each task walked: written as EXISTS, the planner
  // may turn it into a hashed subplan over every row of both tables (it does when it believes few
  // rows have no parent, as in an archive of pipelines), a scan of the whole archive per walk.
  const edgeless = (table: string) => `SELECT parent_id IS NULL AND depends_on IS NULL FROM ${s}.${table} WHERE id = up.id`;
  return `up AS (
  SELECT $1::bigint AS id, 0 AS depth
  UNION
  SELECT p.id, up.depth + 1
  FROM up CROSS JOIN LATERAL (${edgesUp('task')} UNION ALL ${edgesUp('task_archive')}) p(id)
  WHERE p.id IS NOT NULL AND up.depth < 100
), roots AS (
  SELECT DISTINCT id FROM up WHERE (${edgeless('task')} UNION ALL ${edgeless('task_archive')} LIMIT 1)
), down AS (
  SELECT id, 0 AS stage FROM roots
  UNION ALL
  SELECT c.id, down.stage + 1
  FROM down CROSS JOIN LATERAL (
    SELECT id FROM ${s}.task WHERE parent_id = down.id
    UNION ALL SELECT id FROM ${s}.task_archive WHERE parent_id = down.id
    UNION ALL SELECT unnest(dependants) FROM ${s}.task WHERE id = down.id
    UNION ALL SELECT unnest(dependants) FROM ${s}.task_archive WHERE id = down.id
  ) c(id)
  WHERE down.stage < 100
)`;
}

/**
 * First statement of a transaction that runs an inspection statement (the metrics scrape, the
 * dashboard's overview, the pipeline walks). The planner prices their loose index scans (one probe
 * per queue, counts capped per queue) and recursive walks far above jit_above_cost though they run
 * in milliseconds: with JIT on (Postgres' default) compiling them costs many times what they run
 * for. Not a marked statement: a utility command, never worth preparing.
 */
export const JIT_OFF = 'SET LOCAL jit = off';
