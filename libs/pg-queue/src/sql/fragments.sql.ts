/** SQL fragments shared by the statements that insert tasks and wake workers. */

/**
 * The wake-up NOTIFY, as a CTE over a source of (queue, run_at) rows: one notification per queue,
 * payload `queue` or `queue@<epoch ms>` when the earliest row is not due yet. Postgres delivers it at
 * commit. A SELECT CTE runs only when referenced: callers select count(*) FROM notified.
 */
export function notifyCte(source: string, channelParam: string): string {
  return `notified AS (
  SELECT pg_notify(${channelParam}, queue || CASE WHEN min(run_at) > now()
                                   THEN '@' || (extract(epoch FROM min(run_at)) * 1000)::bigint ELSE '' END)
  FROM (${source}) AS wake GROUP BY queue
)`;
}

/**
 * The rows to insert, from one JSON array parameter ($n; built by `taskRowsJson` in the
 * repository), in input order. One string costs Prisma's driver stack once, where the nine
 * parallel arrays it replaced cost it per element: about 4 µs of Node CPU per row.
 */
export function taskInput(param: number): string {
  // A JSON null payload arrives as SQL NULL: it is the JSON value null (every row has the key).
  return `
  SELECT i.queue, coalesce(i.payload, 'null'::jsonb) AS payload, i.priority, i.max_attempts, i.parent_id,
         i.dedup_key, i.group_key, i.trace_context, i.partition_key, i.ord,
         coalesce(i.run_at_in, now() + i.delay_ms * interval '1 millisecond') AS due_at
  FROM ROWS FROM (json_to_recordset($${param}::json) AS (
         queue text, payload jsonb, priority int, run_at_in timestamptz, delay_ms bigint,
         max_attempts int, parent_id bigint, dedup_key text, group_key text, trace_context jsonb, partition_key text))
    WITH ORDINALITY AS i(queue, payload, priority, run_at_in, delay_ms, max_attempts, parent_id, dedup_key, group_key, trace_context, partition_key, ord)`;
}

export const TASK_COLUMNS = 'queue, payload, priority, run_at, max_attempts, parent_id, dedup_key, group_key, trace_context, partition_key';
export const INPUT_VALUES = 'queue, payload, priority, due_at, max_attempts, parent_id, dedup_key, group_key, trace_context, partition_key';
/** A live dedup key (see task_dedup_idx). */
export const ON_LIVE_KEY = `ON CONFLICT (queue, dedup_key) WHERE dedup_key IS NOT NULL AND state IN ('pending', 'running')`;

/**
 * Whether row `t`'s lease token is among $2, as a hashed set built once per statement. `= ANY
 * (array)` would compare each row with every token (500 leases: 250 000 uuid comparisons, about
 * 1 µs of server time per lease). `IS TRUE` keeps the IN a filter (a hashed SubPlan) instead of
 * letting the planner turn it into a join whose shape it would pick from guessed row counts.
 */
export const TOKEN_HELD = `(t.lease_token IN (SELECT unnest(string_to_array($2, ',')::uuid[]))) IS TRUE`;

/**
 * The rows of the leases still held, by primary key. $1 and $2 are the ids and lease tokens as
 * comma-separated text (see `leaseParams`): an array parameter costs Prisma's driver stack work per
 * element, a string costs it once. The id list is parsed in an uncorrelated subquery, which runs
 * once per statement: as a plain expression it would be parsed again for every row the filter
 * checks. (The outer cast only keeps `ANY (subquery)` from meaning "any row of".)
 * No `state = 'running'` here: it would invite the partial task_running_idx, which the planner
 * believes empty and which holds every running task. A token is only ever set together with
 * `running` (a CHECK constraint says so), so the token match implies it.
 */
export const HELD = `t.id = ANY ((SELECT string_to_array($1, ',')::bigint[])::bigint[])
  AND ${TOKEN_HELD}`;

/** How many leases $1 names, counted from its separators (a string function, no parse of the list). */
export const LEASE_COUNT = `(length($1) - length(replace($1, ',', '')) + 1)`;

/** Ids in a result as comma-separated text ('' for none), for the same reason. */
export function idList(column: string, orderBy?: string): string {
  return `coalesce(string_agg((${column})::text, ','${orderBy ? ` ORDER BY ${orderBy}` : ''}), '')`;
}

/**
 * The attempt limit in force for task `t`: the one its last claim recorded (see claim.sql.ts);
 * rows claimed before attempt_limit existed carry it in max_attempts.
 */
export const ATTEMPT_LIMIT = 'coalesce(t.attempt_limit, t.max_attempts)';

/** Whether a cancel request waits for task `t` (schema `s` quoted). */
export function cancelRequestedOf(s: string): string {
  return `EXISTS (SELECT 1 FROM ${s}.task_cancel c WHERE c.task_id = t.id)`;
}

/** Every statement of the queue starts with this marker (see queueStatementName). */
export const STATEMENT_MARKER = '/* pg-queue */';

/** Marks every statement of a statements object, so queueStatementName can recognise it. */
export function marked<T extends Record<string, unknown>>(statements: T): T {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(statements)) {
    out[k] = typeof v === 'string' ? `${STATEMENT_MARKER}${v}` : v && typeof v === 'object' ? marked(v as Record<string, unknown>) : v;
  }
  return out as T;
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
 * Every queue with live tasks, as CTE `queues` (queue) with `running` (queue, running): queues with
 * pending, dead or waiting rows come from loose index scans (one probe per queue, task_due_idx,
 * task_dead_idx and task_waiting_idx), running rows are few and read whole (task_running_idx). No archive, no walk over
 * a queue's rows: what a scrape or the overview may run often.
 */
export function liveQueues(s: string): string {
  const queuesIn = (name: string, state: string) => `${name} AS (
  (SELECT queue FROM ${s}.task WHERE state = '${state}' ORDER BY queue LIMIT 1)
  UNION ALL
  SELECT (SELECT t.queue FROM ${s}.task t WHERE t.state = '${state}' AND t.queue > p.queue ORDER BY t.queue LIMIT 1)
  FROM ${name} p WHERE p.queue IS NOT NULL
)`;
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
 * First statement of a transaction that runs an inspection statement (the metrics scrape, the
 * dashboard's overview, the pipeline walks). The planner prices their loose index scans (one probe
 * per queue, counts capped per queue) and recursive walks far above jit_above_cost though they run
 * in milliseconds: with JIT on (Postgres' default) compiling took 190-420 ms of a 6 ms scrape, and
 * about 50 ms of a 2 ms chain(). Not a marked statement: a utility command, never worth preparing.
 */
export const JIT_OFF = 'SET LOCAL jit = off';
