/**
 * Handler runs recorded by the database's clock, for tests whose workers live in several
 * processes: `fc_run` gets a row when a run starts and its end when it ends (a run whose process
 * was killed has none). Runs recorded in one process are swept by `maxOverlap`.
 */
type Querier = { query(text: string, values?: unknown[]): Promise<{ rows: any[] }> };
type Sql = <T = any>(text: string, values?: unknown[]) => Promise<T[]>;

export async function createRunLog(sql: Sql): Promise<void> {
  await sql('CREATE TABLE IF NOT EXISTS fc_run (id serial PRIMARY KEY, task_id bigint NOT NULL, worker text NOT NULL, started_at timestamptz NOT NULL, ended_at timestamptz)');
}

/** Records a run of `task` that works `workMs`. */
export async function recordedRun(db: Querier, task: { id: string }, worker: string, workMs: number): Promise<void> {
  const { rows } = await db.query('INSERT INTO fc_run (task_id, worker, started_at) VALUES ($1::bigint, $2, clock_timestamp()) RETURNING id', [task.id, worker]);
  await new Promise((resolve) => setTimeout(resolve, workMs));
  await db.query('UPDATE fc_run SET ended_at = clock_timestamp() WHERE id = $1', [rows[0].id]);
}

/** The most runs open at once; a run without an end (its process was killed) ends at `killedAt`. */
export async function maxRunOverlap(sql: Sql, killedAt: Date): Promise<number> {
  const [r] = await sql<{ max: number }>(
    `WITH runs AS (SELECT started_at AS s, coalesce(ended_at, $1::timestamptz) AS e FROM fc_run),
          edges AS (SELECT s AS at, 1 AS d FROM runs UNION ALL SELECT e, -1 FROM runs)
     SELECT coalesce(max(open), 0)::int AS max FROM (SELECT sum(d) OVER (ORDER BY at, d) AS open FROM edges) x`,
    [killedAt],
  );
  return r.max;
}

/** The most of these runs (in one process, on one clock) open at once; an end at the same instant as a start closes first. */
export function maxOverlap(list: { start: number; end: number }[]): number {
  const edges = list.flatMap((r) => [
    { at: r.start, d: 1 },
    { at: r.end, d: -1 },
  ]);
  edges.sort((a, b) => a.at - b.at || a.d - b.d);
  let open = 0;
  let max = 0;
  for (const e of edges) max = Math.max(max, (open += e.d));
  return max;
}
