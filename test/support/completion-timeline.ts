/**
 * Completion rates read back from the archive after a run: each done task's finished_at, by the
 * database's clock, so that the phases a test marks (`dbNow`) and the completions they count share
 * one clock and no polling interval blurs them.
 */
type Sql = <T = any>(text: string, values?: unknown[]) => Promise<T[]>;

/** The database's clock now (ms since the epoch), to mark a phase boundary. */
export async function dbNow(sql: Sql): Promise<number> {
  const [r] = await sql<{ t: number }>('SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS t');
  return r.t;
}

export interface PhaseFigures {
  seconds: number;
  done: number;
  /** Tasks done per second over the phase. */
  rate: number;
  /** The longest time in the phase without a completion (from its start, between two, to its end), ms. */
  longestGapMs: number;
  /** Completions in each whole second of the phase. */
  perSecond: number[];
}

/** Completions of `queue` between `fromMs` and `toMs` (database clock). */
export async function phaseFigures(sql: Sql, queue: string, fromMs: number, toMs: number, schema = 'pgqueue'): Promise<PhaseFigures> {
  const rows = await sql<{ t: number }>(
    `SELECT (extract(epoch FROM finished_at) * 1000)::float8 AS t FROM ${schema}.task_archive
     WHERE queue = $1 AND state = 'done' AND finished_at >= to_timestamp($2 / 1000.0) AND finished_at < to_timestamp($3 / 1000.0)
     ORDER BY finished_at`,
    [queue, fromMs, toMs],
  );
  const times = [fromMs, ...rows.map((r) => r.t), toMs];
  let longestGapMs = 0;
  for (let i = 1; i < times.length; i++) longestGapMs = Math.max(longestGapMs, times[i] - times[i - 1]);
  const perSecond = Array.from({ length: Math.floor((toMs - fromMs) / 1000) }, () => 0);
  for (const r of rows) {
    const s = Math.floor((r.t - fromMs) / 1000);
    if (s < perSecond.length) perSecond[s]++;
  }
  const seconds = (toMs - fromMs) / 1000;
  return { seconds, done: rows.length, rate: rows.length / seconds, longestGapMs: Math.round(longestGapMs), perSecond };
}
