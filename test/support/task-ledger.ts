/**
 * The fault tests' bookkeeping: what handlers record, and how a test audits a queue at the end.
 *
 * - `effect`: the business write of a transactional handler, made in ctx.tx. It has no unique
 *   constraint on purpose: a task whose effect committed twice shows as two rows (a constraint
 *   would turn the duplicate into a failed attempt and hide it).
 * - `run`: one row per lease-mode handler run, written on a plain connection outside any
 *   transaction (at-least-once: a task may have several).
 */
type Sql = <T = any>(text: string, values?: unknown[]) => Promise<T[]>;
type Executor = { $executeRawUnsafe(query: string, ...values: unknown[]): PromiseLike<number> };
type Querier = { query(text: string, values?: unknown[]): Promise<unknown> };

export async function createLedgerTables(sql: Sql): Promise<void> {
  await sql('CREATE TABLE IF NOT EXISTS effect (task_id bigint NOT NULL, attempt int NOT NULL, worker text NOT NULL)');
  await sql('CREATE TABLE IF NOT EXISTS run (task_id bigint NOT NULL, attempt int NOT NULL, worker text NOT NULL)');
}

/** A transactional handler's business write (pass ctx.tx). */
export async function recordEffect(tx: Executor, task: { id: string; attempt: number }, worker: string): Promise<void> {
  await tx.$executeRawUnsafe('INSERT INTO effect (task_id, attempt, worker) VALUES ($1::bigint, $2, $3)', task.id, task.attempt, worker);
}

/** A lease-mode handler's record of one run (pass a pg Pool or Client). */
export async function recordRun(db: Querier, task: { id: string; attempt: number }, worker: string): Promise<void> {
  await db.query('INSERT INTO run (task_id, attempt, worker) VALUES ($1::bigint, $2, $3)', [task.id, task.attempt, worker]);
}

export interface QueueStates {
  pending: number;
  running: number;
  done: number;
  dead: number;
  cancelled: number;
}

/** Tasks of `queue` by state, hot table and archive together (one statement, one snapshot). */
export async function queueStates(sql: Sql, queue: string, schema = 'pgqueue'): Promise<QueueStates> {
  const rows = await sql<{ state: keyof QueueStates; n: number }>(
    `SELECT state, count(*)::int AS n FROM (
       SELECT state FROM ${schema}.task WHERE queue = $1
       UNION ALL SELECT state FROM ${schema}.task_archive WHERE queue = $1) s
     GROUP BY state`,
    [queue],
  );
  const states: QueueStates = { pending: 0, running: 0, done: 0, dead: 0, cancelled: 0 };
  for (const r of rows) states[r.state] = r.n;
  return states;
}

/** True once no task of `queue` is pending or running (every one finished one way or another). */
export async function settled(sql: Sql, queue: string, schema = 'pgqueue'): Promise<boolean> {
  const s = await queueStates(sql, queue, schema);
  return s.pending === 0 && s.running === 0;
}

/**
 * Transactional queue audit against the archive: every done task has exactly one effect row,
 * written by the attempt that completed it. Lists offenders (at most 5 of each kind).
 */
export async function auditExactlyOnce(sql: Sql, queue: string, schema = 'pgqueue') {
  const [r] = await sql<{ effects: number; missing: string[]; duplicated: string[]; wrong_attempt: string[]; orphans: number }>(
    `WITH e AS (SELECT task_id, count(*)::int AS n, max(attempt) AS attempt FROM effect GROUP BY task_id),
          a AS (SELECT id, attempt FROM ${schema}.task_archive WHERE queue = $1 AND state = 'done')
     SELECT (SELECT count(*)::int FROM effect e2 WHERE e2.task_id IN (SELECT id FROM a)) AS effects,
            (SELECT coalesce(array_agg(id::text), '{}') FROM (SELECT a.id FROM a LEFT JOIN e ON e.task_id = a.id WHERE e.task_id IS NULL LIMIT 5) x) AS missing,
            (SELECT coalesce(array_agg(task_id::text || '×' || n), '{}') FROM (SELECT e.task_id, e.n FROM e JOIN a ON a.id = e.task_id WHERE e.n > 1 LIMIT 5) x) AS duplicated,
            (SELECT coalesce(array_agg(id::text), '{}') FROM (SELECT a.id FROM a JOIN e ON e.task_id = a.id WHERE e.n = 1 AND e.attempt <> a.attempt LIMIT 5) x) AS wrong_attempt,
            -- effects of tasks that are not done: their transaction must never have committed
            (SELECT count(*)::int FROM effect e3 JOIN ${schema}.task t ON t.id = e3.task_id WHERE t.queue = $1) AS orphans`,
    [queue],
  );
  return r;
}

/**
 * Lease queue audit: every done task ran at least once, including the attempt that completed
 * it. `rerunTasks` counts tasks that ran more than once (allowed: at-least-once), for the report.
 */
export async function auditAtLeastOnce(sql: Sql, queue: string, schema = 'pgqueue') {
  const [r] = await sql<{ never_ran: string[]; completing_run_missing: string[]; rerun_tasks: number; runs: number }>(
    `WITH a AS (SELECT id, attempt FROM ${schema}.task_archive WHERE queue = $1 AND state = 'done')
     SELECT (SELECT coalesce(array_agg(id::text), '{}') FROM (SELECT id FROM a WHERE NOT EXISTS (SELECT 1 FROM run r WHERE r.task_id = a.id) LIMIT 5) x) AS never_ran,
            (SELECT coalesce(array_agg(id::text), '{}') FROM (SELECT id FROM a WHERE NOT EXISTS (SELECT 1 FROM run r WHERE r.task_id = a.id AND r.attempt = a.attempt) LIMIT 5) x) AS completing_run_missing,
            (SELECT count(*)::int FROM (SELECT task_id FROM run WHERE task_id IN (SELECT id FROM a) GROUP BY 1 HAVING count(*) > 1) x) AS rerun_tasks,
            (SELECT count(*)::int FROM run WHERE task_id IN (SELECT id FROM a)) AS runs`,
    [queue],
  );
  return r;
}

/** How many of the queue's finished tasks needed 1, 2, 3… attempts, and why the dead ones died. */
export async function attemptsReport(sql: Sql, queue: string, schema = 'pgqueue') {
  const attempts = await sql<{ attempt: number; n: number }>(
    `SELECT attempt, count(*)::int AS n FROM (
       SELECT attempt FROM ${schema}.task WHERE queue = $1 UNION ALL SELECT attempt FROM ${schema}.task_archive WHERE queue = $1) s
     GROUP BY 1 ORDER BY 1`,
    [queue],
  );
  const dead = await sql<{ last_error: string; n: number }>(
    `SELECT left(last_error, 200) AS last_error, count(*)::int AS n FROM ${schema}.task WHERE queue = $1 AND state = 'dead' GROUP BY 1 ORDER BY 2 DESC LIMIT 5`,
    [queue],
  );
  const totalAttempts = attempts.reduce((sum, r) => sum + r.attempt * r.n, 0);
  return { attempts: Object.fromEntries(attempts.map((r) => [r.attempt, r.n])), totalAttempts, dead };
}
