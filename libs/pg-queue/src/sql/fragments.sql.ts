/** SQL fragments shared by the statements that insert, claim and end tasks and wake workers (the hot path); inspection's are in inspect.fragments.ts. */

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

/** A live dedup key (see task_dedup_idx). */
export const ON_LIVE_KEY = `ON CONFLICT (queue, dedup_key) WHERE dedup_key IS NOT NULL AND state IN ('pending', 'running')`;

/**
 * Whether row `t`'s lease token is among $2, as a hashed set built once per statement. `= ANY
 * (array)` would compare each row with every token (quadratic in the number of leases). `IS TRUE`
 * keeps the IN a filter (a hashed SubPlan) instead of
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

/**
 * How long a lease-mode statement that ends or parks an attempt waits for a task's row lock (see
 * rowLockBound): the library's own holders keep a running task's row for milliseconds.
 */
export const ROW_LOCK_WAIT_MS = 1000;

/**
 * For a statement run outside a transaction: waits for row locks at most `ms`, then fails with
 * 55P03. Set (for this statement's implicit transaction only) by an uncorrelated subquery, which
 * runs once, before the first row is checked and so before any row lock is asked for. A running
 * task's row is held for long only by a business transaction (it enqueued a dependant of the task,
 * or asked it to rerun, inside `{ tx }`); the library's own holders are short and bounded.
 */
export function rowLockBound(ms: number | null = ROW_LOCK_WAIT_MS): string {
  return ms === null ? '' : `\n  AND (SELECT set_config('lock_timeout', '${ms}ms', true)) IS NOT NULL`;
}

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
