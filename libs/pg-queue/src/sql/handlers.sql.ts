import { marked } from './fragments.sql';
import { oldestDueAndHandlers, queuesWith, unhandledMs } from './inspect.fragments';
import { quoteIdent } from './identifiers';
import type { RuntimeFunctionDefinition } from './runtime-functions';

/** Rows of queue_handler expired this long ago are deleted: how long a departed handler is remembered. */
const FORGET_AFTER = "interval '1 day'";

/**
 * In one round trip: this instance's rows for the queues it handles, renewed until $3 ms from now
 * (the instance is taken for dead past it); rows expired a day ago deleted (SKIP LOCKED: instances
 * pruning at once do not wait for each other); and the queues with due tasks that no live instance
 * handles, unhandled for over $4 ms (a handler restarting is not reported), with their due tasks
 * counted up to $5. Queues come from a loose index scan of the pending rows (task_due_idx). The
 * data-modifying CTEs run whether read or not, on the statement's snapshot: this instance's own
 * queues are left out of the report by name ($1).
 * Parameters: $1 queue[] handled here, $2 instance, $3 ttl ms, $4 grace ms, $5 count cap.
 */
function passSql(s: string): string {
  return `
WITH RECURSIVE seen AS (
  INSERT INTO ${s}.queue_handler (queue, instance, seen_at, expires_at)
  SELECT DISTINCT q, $2::text, now(), now() + $3::float8 * interval '1 millisecond' FROM unnest($1::text[]) q
  ON CONFLICT (queue, instance) DO UPDATE SET seen_at = excluded.seen_at, expires_at = excluded.expires_at
  RETURNING 1
), pruned AS (
  DELETE FROM ${s}.queue_handler WHERE (queue, instance) IN (
    SELECT queue, instance FROM ${s}.queue_handler WHERE expires_at < now() - ${FORGET_AFTER} FOR UPDATE SKIP LOCKED
  )
  RETURNING 1
), ${queuesWith(s, 'pending_queues', 'pending')}
SELECT q.queue,
       (SELECT count(*) FROM (
          SELECT 1 FROM ${s}.task t WHERE t.queue = q.queue AND t.state = 'pending' AND t.run_at <= now() LIMIT $5
        ) due)::int AS due,
       u.ms AS unhandled_ms
FROM pending_queues q
${oldestDueAndHandlers(s)}
CROSS JOIN LATERAL (SELECT ${unhandledMs('h', 'o.run_at')} AS ms) u
WHERE q.queue IS NOT NULL AND q.queue <> ALL ($1::text[]) AND u.ms > $4::float8
ORDER BY q.queue`;
}

/**
 * `handler_pass(...)`: passSql as a function that runs with JIT off, so a periodic pass is one
 * statement. The planner prices its loose index scan far above jit_above_cost (see JIT_OFF in
 * inspect.fragments.ts), and a statement alone cannot turn JIT off for itself; `SET jit = off` on a
 * function applies while its body is planned and run.
 */
export const handlerPass: RuntimeFunctionDefinition = {
  name: 'handler_pass',
  args: 'text[], text, double precision, double precision, integer',
  requires: 13,
  release: 1,
  body: (s) => `
CREATE OR REPLACE FUNCTION ${s}.handler_pass(text[], text, float8, float8, int)
RETURNS TABLE (queue text, due int, unhandled_ms float8) LANGUAGE sql VOLATILE SET jit = off AS $fn$${passSql(s)}
$fn$`,
};

/**
 * Which running instance handles which queue (table queue_handler, migration 13), so that a queue
 * with due tasks and no live handler shows up: a typo in a @TaskHandler queue name, or no worker
 * deployed, would otherwise leave the producer's tasks pending with no sign anywhere. Every
 * started instance runs `pass` at its start and on each periodic pass (see HandlerPresence),
 * `retire` at shutdown.
 * The inspection reads (metrics, the dashboard's overview, health) join the table per queue (see
 * queueHandlers in inspect.fragments.ts).
 */
export function handlerStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    /** passSql, for a transaction that set JIT off: where handler_pass is not installed (see HandlerRepository). */
    pass: passSql(s),

    /** One periodic pass (see passSql), through handler_pass. Same parameters. */
    passByFunction: `
SELECT queue, due, unhandled_ms FROM ${s}.handler_pass($1::text[], $2::text, $3::float8, $4::float8, $5::int) ORDER BY queue`,

    /**
     * At shutdown: this instance handles nothing from now on. Its rows stay, expired, so that the
     * inspection reads know since when a queue has had no handler. Reads every row of a table of a
     * few rows per instance. Parameters: $1 instance.
     */
    retire: `
UPDATE ${s}.queue_handler SET expires_at = now() WHERE instance = $1::text AND expires_at > now()`,
  });
}
