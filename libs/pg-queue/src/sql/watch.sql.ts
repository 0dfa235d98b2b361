import { marked, notifyCte } from './fragments.sql';
import { quoteIdent } from './identifiers';

/** Notification payload of a task's end or failed attempt: `!ended <id> <state> <queue>` (see WakeupListener). */
export const ENDED_NOTICE = '!ended ';

/**
 * Telling other processes that tasks ended (waitFor, the cross-process event stream). Table
 * task_watch and column task.watched, migration 22.
 *
 * Cost decision: a plain queue's completion sends no NOTIFY. Every statement that ends a task
 * (complete, fail, release, rescue, cancel, settle, quarantine) carries `toldCte`, which sends
 * `!ended` only for rows that someone waits for or watches: the row's own `watched` flag (read from
 * the row the statement already returns, no extra read) or, failing that, its queue among the
 * live rows of task_watch (one read of that tiny, usually empty table per statement: an initplan,
 * whatever the batch size). The payload carries id, state and queue only (NOTIFY payloads stop at
 * 8000 bytes): a waiter reads the result from the row.
 *
 * No lost wake-up: waitFor first has its LISTEN up, then marks the task's row (`mark`, a row lock
 * like the ending statement's), then reads the task's state in a new statement. Either the mark
 * commits first, and the ending statement, which locks the same row, returns its newest version
 * (READ COMMITTED re-reads a row changed under it) with `watched` set and notifies; or the end
 * commits first, and the mark finds the row gone or ended, and the read after it sees the end.
 */
export function toldCte(s: string, source: string, channel: string): string {
  return `told AS (
  SELECT pg_notify(${channel}, '${ENDED_NOTICE}' || x.id || ' ' || x.state || ' ' || x.queue)
  FROM (${source}) x
  WHERE ${watchedRow(s)}
)`;
}

/** Whether row `x` (with `watched` and `queue`) is waited for or its queue watched (see toldCte). */
function watchedRow(s: string): string {
  return `(x.watched IS TRUE
     OR ARRAY[x.queue, ''] && (SELECT coalesce(array_agg(w.queue), '{}') FROM ${s}.task_watch w WHERE w.until > now()))`;
}

/**
 * The same for a progress value that an attempt reported (task-report.sql.ts): `!ended <id>
 * progress <queue> <value as JSON>` (at most 1 024 bytes of JSON, see PROGRESS_MAX_BYTES: well
 * inside NOTIFY's 8 000), for the tasks someone waits for or watches, as toldCte decides.
 */
export function progressToldCte(s: string, source: string, progress: string, channel: string): string {
  return `told AS (
  SELECT pg_notify(${channel}, '${ENDED_NOTICE}' || x.id || ' progress ' || x.queue || ' ' || ${progress})
  FROM (${source}) x
  WHERE ${progress} IS NOT NULL AND ${watchedRow(s)}
)`;
}

export function watchStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    /**
     * Marks an unfinished task as waited for (see above). A no-op on a row already marked, so
     * many waiters write it once. Its row lock makes a claim in that instant pass over the task
     * (SKIP LOCKED), and the worker may then idle till its next poll: a pending task's queue is
     * woken again (the NOTIFY of due work, sent at commit). Parameters: $1 id, $2 channel.
     */
    mark: `
WITH marked AS (
  UPDATE ${s}.task SET watched = true
  WHERE id = $1::bigint AND watched IS NOT TRUE AND state IN ('pending', 'running', 'waiting')
  RETURNING queue, state, run_at
), ${notifyCte("SELECT queue, run_at FROM marked WHERE state = 'pending'", '$2')}
SELECT (SELECT count(*) FROM marked)::int AS marked, (SELECT count(*) FROM notified)::int AS notified`,

    /**
     * Starts or extends a stream's interest in queues (text[]; '' for all) until $3 ms from now,
     * and drops rows whose subscriber stopped refreshing them. Parameters: $1 subscriber, $2 queues, $3 ms.
     */
    subscribe: `
WITH gone AS (DELETE FROM ${s}.task_watch WHERE until < now() - interval '1 minute')
INSERT INTO ${s}.task_watch (subscriber, queue, until)
SELECT $1, q, now() + $3 * interval '1 millisecond' FROM unnest($2::text[]) AS q
ON CONFLICT (subscriber, queue) DO UPDATE SET until = EXCLUDED.until`,

    /** Ends a stream's interest. Parameters: $1 subscriber. */
    unsubscribe: `DELETE FROM ${s}.task_watch WHERE subscriber = $1`,
  });
}
