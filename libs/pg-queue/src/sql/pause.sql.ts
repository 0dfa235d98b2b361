import { marked } from './fragments.sql';
import { quoteIdent } from './identifiers';

/** Notification payloads: a queue was paused (`!pause <queue>`) or resumed (`!resume <queue>`) as a whole (see WakeupListener). */
export const PAUSE_NOTICE = '!pause ';
export const RESUME_NOTICE = '!resume ';

/**
 * Paused queues and partitions (table queue_pause, migration 18): `partition_key` '' is the whole
 * queue (a partition key is never ''), any other value one partition of it.
 *
 * How a claim learns of a pause. Instances keep the queues paused as a whole in memory (PauseWatcher:
 * read at start, told by `!pause`/`!resume` notifications, read again every poll period and after
 * LISTEN reconnects) and do not claim from them; that saves the claims, it is not what guarantees
 * anything. The guarantee is in the claim statements themselves (`claimable` in claim.sql.ts,
 * and `room` in limits.sql.ts), whatever an instance missed:
 * - one probe of queue_pause's primary key per claim, an initplan the planner makes a one-time
 *   filter: a paused queue's claim scans no task at all; an unpaused one's pays the probe of a
 *   tiny (usually empty) table.
 * - one more probe per claim ("has this queue any paused partition?"); only when it has one does
 *   each candidate row with a partition key pay a probe of its own.
 * - A claim that read queue_pause before a pause committed and runs on after it would still take
 *   tasks with its older snapshot. So `pause` takes queue_pause's ACCESS EXCLUSIVE lock before it
 *   inserts: it waits for the claims in flight (each holds ACCESS SHARE on the table until it
 *   ends), and claims that start meanwhile wait for its commit; a statement's snapshot is taken
 *   after its table locks, so they see the pause. Every claim of every queue waits for that moment
 *   (the pause's own statement, a millisecond), or at most PAUSE_LOCK_TIMEOUT when some
 *   long transaction holds the table: the pause then fails and nothing waited longer.
 *   Once `pause()` returns, no claim of the queue commits.
 * A resume needs no lock: a claim that does not yet see it finds nothing, and the `!resume`
 * notification, sent at commit, wakes the workers to claim again.
 */
export const PAUSE_LOCK_TIMEOUT = '2s';

export function pauseStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    /** First statement of a pause's transaction. */
    lockTimeout: `SET LOCAL lock_timeout = '${PAUSE_LOCK_TIMEOUT}'`,
    /** Second: waits for the claims in flight (see above). */
    lock: `LOCK TABLE ${s}.queue_pause IN ACCESS EXCLUSIVE MODE`,
    /**
     * Pauses queue $1 (partition $2, '' for the whole queue); `paused` false when it already was.
     * A whole queue's pause is announced (`!pause <queue>` on $3, at commit).
     */
    pause: `
WITH added AS (
  INSERT INTO ${s}.queue_pause (queue, partition_key) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM added) AS paused,
       CASE WHEN $2 = '' THEN pg_notify($3, '${PAUSE_NOTICE}' || $1)::text IS NOT NULL END AS notified`,
    /**
     * Resumes queue $1 (partition $2, '' for the whole queue); `resumed` false when it was not
     * paused. Announced at commit on $3: a whole queue by `!resume <queue>`, a partition by the
     * plain wake-up `<queue>` (its tasks may be due).
     */
    resume: `
WITH gone AS (
  DELETE FROM ${s}.queue_pause WHERE queue = $1 AND partition_key = $2 RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM gone) AS resumed,
       pg_notify($3, CASE WHEN $2 = '' THEN '${RESUME_NOTICE}' || $1 ELSE $1 END)::text IS NOT NULL AS notified`,
    /** Every pause, oldest queue name first. */
    list: `SELECT queue, partition_key, paused_at FROM ${s}.queue_pause ORDER BY queue, partition_key`,
  });
}
