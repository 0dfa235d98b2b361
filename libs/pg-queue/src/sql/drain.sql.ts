import { quoteIdent } from './identifiers';
import { marked } from './fragments.sql';

/**
 * The statements of the test helper `drainQueue` (worker/queue.drainer.ts): never on a worker's
 * path. Each takes the drained queues as $1 (text[]).
 */
export function drainStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    /**
     * `runDelayed`: pending tasks of the queues due later (delayed, or a retry waiting out its
     * backoff) become due now. Only run_at changes: attempts, group places and keys stay.
     */
    runDelayedNow: `
WITH moved AS (
  UPDATE ${s}.task SET run_at = now()
  WHERE state = 'pending' AND queue = ANY ($1::text[]) AND run_at > now()
  RETURNING 1
)
SELECT count(*)::int AS moved FROM moved`,

    /**
     * What is left in each queue of $1: due (pending with run_at passed, or any pending when $2),
     * running under a live lease (in this process or another), running with an expired lease (for
     * the rescuer), waiting for dependencies, parked workflows (sleeping or waiting for a signal or a
     * child), and dependency and child debts not settled yet (see
     * dependencies.sql.ts). The drain waits for the debts; the rest is what its timeout reports.
     */
    left: `
SELECT q.queue,
       (SELECT count(*) FROM ${s}.task t WHERE t.queue = q.queue AND t.state = 'pending' AND ($2::boolean OR t.run_at <= now()))::int AS due,
       (SELECT count(*) FROM ${s}.task t WHERE t.queue = q.queue AND t.state = 'running' AND t.locked_until > now())::int AS running,
       (SELECT count(*) FROM ${s}.task t WHERE t.queue = q.queue AND t.state = 'running' AND t.locked_until <= now())::int AS expired,
       (SELECT count(*) FROM ${s}.task t WHERE t.queue = q.queue AND t.state = 'waiting' AND t.waiting_for IS NULL)::int AS waiting,
       (SELECT count(*) FROM ${s}.task t WHERE t.queue = q.queue AND t.state = 'waiting' AND t.waiting_for IS NOT NULL)::int AS parked,
       (SELECT count(*) FROM ${s}.task_dependency_debt d JOIN ${s}.task w ON w.id = d.dependant
        WHERE w.queue = q.queue AND w.state = 'waiting')::int
       + (SELECT count(*) FROM ${s}.workflow_child_debt d JOIN ${s}.task w ON w.id = d.parent
          WHERE w.queue = q.queue AND w.state IN ('waiting', 'running'))::int AS unsettled
FROM unnest($1::text[]) AS q(queue)
ORDER BY q.queue`,

    /**
     * Queues outside $1 with pending tasks (due ones, or all when $2): what a drain of every queue
     * the app handles could not run.
     */
    undrained: `
SELECT queue, count(*)::int AS pending
FROM ${s}.task
WHERE state = 'pending' AND ($2::boolean OR run_at <= now()) AND queue <> ALL ($1::text[])
GROUP BY queue
ORDER BY queue`,
  });
}
