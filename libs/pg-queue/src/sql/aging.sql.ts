import { claimable, claimFrom } from './claim.sql';
import { marked } from './fragments.sql';
import { quoteIdent } from './identifiers';

/** The most priority levels an aging claim reads (the queue's most urgent ones with pending tasks). */
export const AGING_LEVELS = 32;

/**
 * Priority aging (the handler option `priorityAgingMs`, A): a due task's effective priority is its
 * priority less the time since it became due (run_at) over A, so waiting A raises it one level.
 * Claims take the least effective priority first, ties by due time, then id: ordering by
 * `priority * A + run_at` (in ms) is the same order, and does not move with the clock. So a task of
 * priority p due at T runs before every task of a more urgent priority q that became due after
 * T + (p - q) * A: a steady stream of priority-q tasks delays it at most (p - q) * A.
 *
 * No index holds that order (A is a handler's setting, and may change), but one level's due tasks
 * are in it already: task_claim_idx (queue, priority, run_at, id) orders them by due time. So the
 * claim reads, for each of the AGING_LEVELS most urgent priorities with pending tasks (a skip scan
 * of that index, one probe a level), its first due tasks up to the batch size (an index range),
 * and takes the batch's best of them by effective priority: at most AGING_LEVELS × batch rows read
 * whatever the backlog. Those levels may hold only delayed or retrying tasks while due work waits
 * at a less urgent priority: the plain claim's candidates (the batch's first due tasks by
 * priority, then due time) join them, so an aging claim never takes less than a plain one would,
 * and tasks of levels beyond those are claimed as without aging.
 *
 * Run in a limited claim's transaction, under the queue's lock (limits.sql.ts): claimers never
 * contend for the same best rows, which are chosen before they are locked (SKIP LOCKED then passes
 * over only rows a business transaction holds).
 * Parameters as claimFrom, and $6 priorityAgingMs, $7 the most levels read (AGING_LEVELS), $8 the
 * claim's id (see claim.sql.ts).
 */
export function agingStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    claim: claimFrom(
      s,
      `
  SELECT t.id FROM ${s}.task t
  WHERE t.id = ANY (ARRAY (SELECT a.id FROM aged a ORDER BY a.key, a.id LIMIT $2))
    AND t.state = 'pending' AND t.run_at <= now()
  FOR UPDATE OF t SKIP LOCKED`,
      {
        token: '$8',
        ctes: `levels AS (
  -- The queue's priorities with pending tasks, most urgent first: one probe of task_claim_idx each.
  SELECT (SELECT min(t.priority) FROM ${s}.task t WHERE t.queue = $1 AND t.state = 'pending') AS p, 1 AS n
  UNION ALL
  SELECT (SELECT min(t.priority) FROM ${s}.task t WHERE t.queue = $1 AND t.state = 'pending' AND t.priority > l.p), l.n + 1
  FROM levels l
  WHERE l.p IS NOT NULL AND l.n < $7
), aged AS MATERIALIZED (
  -- Each level's first due tasks, by due time (its effective priority order), with their key.
  SELECT c.id, c.key
  FROM levels l
  CROSS JOIN LATERAL (
    SELECT t.id, t.priority * $6::numeric + extract(epoch FROM t.run_at) * 1000 AS key
    FROM ${s}.task t
    WHERE t.queue = $1 AND t.state = 'pending' AND t.priority = l.p AND t.run_at <= now()
      AND ${claimable(s)}
    ORDER BY t.run_at, t.id
    LIMIT $2
  ) c
  WHERE l.p IS NOT NULL
  UNION
  -- The plain claim's candidates (see above).
  (SELECT t.id, t.priority * $6::numeric + extract(epoch FROM t.run_at) * 1000 AS key
   FROM ${s}.task t
   WHERE t.queue = $1 AND t.state = 'pending' AND t.run_at <= now()
     AND ${claimable(s)}
   ORDER BY t.priority, t.run_at, t.id
   LIMIT $2)
)`,
      },
    ),
  });
}
