import { marked, rowLockBound } from './fragments.sql';
import { progressToldCte } from './watch.sql';
import { quoteIdent } from './identifiers';

/**
 * A task's progress and log (migration 20: columns `progress` and `log` of task and task_archive).
 *
 * - The log is a JSON array of entries `{ at, attempt, kind, message, ms }` (at: epoch ms; kind
 *   'log' for a ctx.log line, 'error' for a failed attempt, whose `ms` is how long it ran). Only
 *   the newest LOG_ENTRIES_KEPT stay: every append cuts the array, so a task's log is bounded
 *   whatever its handlers write (entries are bounded too: lines by the worker, errors by
 *   maxErrorBytes).
 * - Both live on the task row, so the statements that archive a row carry them (complete.sql.ts,
 *   operate.sql.ts) and retention drops them with it.
 * - Writes are fenced by the lease token like a completion: a worker whose lease was lost changes
 *   nothing. They only touch the row's non-key columns, so a transactional batch's FOR KEY SHARE
 *   lock on it (claim.sql.ts, lockLeases) does not make them wait, and its rollback does not undo
 *   them: they commit on their own, through the app's client, outside the handler's transaction.
 */
export const LOG_ENTRIES_KEPT = 200;

/** `current` (a jsonb array or NULL) with the array `entries` appended, cut to the newest LOG_ENTRIES_KEPT. */
export function appendedLog(current: string, entries: string): string {
  return `(SELECT jsonb_agg(e ORDER BY n) FROM (
    SELECT e, n FROM jsonb_array_elements(coalesce(${current}, '[]'::jsonb) || ${entries}) WITH ORDINALITY AS x(e, n)
    ORDER BY n DESC LIMIT ${LOG_ENTRIES_KEPT}) kept)`;
}

/** The log entry of a failed attempt of row `t`: its error text and how long it ran (ms, may be NULL). */
export function failureEntry(error: string, ms: string): string {
  return `jsonb_build_array(jsonb_build_object('at', (extract(epoch FROM now()) * 1000)::bigint, 'attempt', t.attempt,
    'kind', 'error', 'message', ${error}, 'ms', ${ms}))`;
}

export function reportStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    /**
     * An attempt's progress and new log entries, fenced by its lease. Parameters: $1 id, $2 lease
     * token, $3 progress as JSON text (NULL: unchanged), $4 entries as a JSON array (NULL: none).
     * Returns the id when the lease still held, no row otherwise. Its wait for the row lock is
     * bounded (a business transaction may hold the row): the reporter keeps the write for later.
     * A new progress value of a task someone waits for or watches is told to every process
     * (watch.sql.ts). $5 channel.
     */
    report: `
WITH reported AS (
  UPDATE ${s}.task t
  SET progress = CASE WHEN $3::text IS NULL THEN t.progress ELSE $3::jsonb END,
      log = CASE WHEN $4::text IS NULL THEN t.log ELSE ${appendedLog('t.log', '$4::jsonb')} END
  WHERE t.id = $1::bigint AND t.lease_token = $2::uuid${rowLockBound()}
  RETURNING t.id, t.queue, t.watched
), ${progressToldCte(s, 'SELECT id, queue, watched FROM reported', '$3::text', '$5')}
SELECT id::text AS id, (SELECT count(*) FROM told)::int AS told FROM reported`,

    /** A task's log, live or archived (no row: no such task). Parameters: $1 id. */
    logs: `
SELECT coalesce(log, '[]'::jsonb) AS log FROM ${s}.task WHERE id = $1::bigint
UNION ALL
SELECT coalesce(log, '[]'::jsonb) FROM ${s}.task_archive WHERE id = $1::bigint
LIMIT 1`,
  });
}
