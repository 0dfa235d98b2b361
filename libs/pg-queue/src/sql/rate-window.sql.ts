/**
 * A rate window (rateLimit: at most `max` claims in any `perMs` window), kept in a few numbers
 * whatever `max` is: two parallel arrays, `at` (ascending) and `n`, one entry per step of the
 * window with claims in it. A step is perMs / RATE_STEPS long, aligned to the epoch; `n` counts
 * the claims made in it and `at` is the time of its latest. So a row holds at most RATE_STEPS + 1
 * live entries (about 300 bytes), and a claim reads and rewrites that much, where one timestamp per
 * claim would hold up to `max` of them, rewritten under the queue's lock by every claim.
 *
 * Exact, never over: an entry counts while its latest claim is inside the window, so all of its
 * claims count until then: the window never holds more than `max` claims, as the log of every
 * timestamp would not let it either. What it costs: a step's earlier claims free their slots only
 * when its latest one does, at most perMs / RATE_STEPS (5 %) after a log of each would have.
 *
 * Fragments over an entry list `at`, `n` (column expressions), the window `ms` (a number
 * expression) and the time `now` (a timestamptz expression; the caller's clock_timestamp(), read
 * under the queue's lock, the same for the count and the claims it records).
 */
export const RATE_STEPS = 20;

const ms = (t: string) => `(extract(epoch FROM ${t}) * 1000)`;
/** The step a time falls in: its index from the epoch, for a window of `windowMs`. */
const step = (t: string, windowMs: string) => `floor(${ms(t)} * ${RATE_STEPS} / nullif((${windowMs})::float8, 0))`;
/** An entry inside the window; a window of 0 ms (no rate limit) holds none. */
const live = (windowMs: string, now: string) => `e.at > ${now} - (${windowMs})::float8 * interval '1 millisecond'`;

/** The claims inside the window at `now` (int, 0 for none). */
export function windowCount(at: string, n: string, windowMs: string, now: string): string {
  return `(SELECT coalesce(sum(e.n), 0)::int FROM unnest(${at}, ${n}) AS e(at, n) WHERE ${live(windowMs, now)})`;
}

/** When the window's oldest entry leaves it, in ms from `now` (NULL: the window is empty). */
export function windowFreesInMs(at: string, n: string, windowMs: string, now: string): string {
  return `(SELECT (${ms(`min(e.at) + (${windowMs})::float8 * interval '1 millisecond'`)} - ${ms(now)})::float8
          FROM unnest(${at}, ${n}) AS e(at, n) WHERE ${live(windowMs, now)})`;
}

/**
 * The entry list after `add` claims at `now`, as one row (at, n) for `SET (a, n) = (...)`: the
 * entries still inside the window, those of now's step (one, or more when the window was changed or
 * the clock went back) folded into one with the new claims, dated at the latest of them.
 */
export function windowAdd(at: string, n: string, windowMs: string, add: string, now: string): string {
  const current = `${step('e.at', windowMs)} >= ${step(now, windowMs)}`;
  return `(
    SELECT coalesce(array_agg(x.at ORDER BY x.at), '{}'), coalesce(array_agg(x.n ORDER BY x.at), '{}')
    FROM (
      SELECT e.at, e.n FROM unnest(${at}, ${n}) AS e(at, n) WHERE ${live(windowMs, now)} AND NOT ${current}
      UNION ALL
      SELECT greatest(${now}, max(e.at)), (${add} + coalesce(sum(e.n), 0))::int
      FROM unnest(${at}, ${n}) AS e(at, n) WHERE ${live(windowMs, now)} AND ${current}
      HAVING ${add} + coalesce(sum(e.n), 0) > 0
    ) x
  )`;
}
