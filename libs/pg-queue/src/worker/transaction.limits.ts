/** The limits a transactional batch runs under (see TransactionalRunner). */

/** Past this, a batch transaction stops starting tasks and commits; the rest get a new transaction. */
export const TX_BUDGET_MS = 200;
/**
 * Past this many savepoints (handlers that used ctx.tx), likewise. A backend caches the ids of 64
 * subtransactions; beyond that every snapshot in the cluster must consult pg_subtrans, which slows
 * the whole database ("subtransaction overflow"). Handlers that never touch ctx.tx take none.
 */
export const MAX_SAVEPOINTS = 48;
/**
 * How long a batch waits for a pool connection to start its transaction. Past it the batch's
 * tasks are released uncounted (a small pool slows the queue, never kills tasks) and claimed
 * again; a long wait would only keep them from workers that have a connection.
 */
export const TX_START_WAIT_MS = 2000;
/** Server-side idle-in-transaction limit beyond the handler timeout (see lockLeases). */
export const IDLE_GRACE_MS = 1000;
/** How long a timed-out handler may take to settle before its whole transaction is rolled back. */
export const SETTLE_GRACE_MS = 250;
/**
 * Server-side limit on any one statement of a batch, beyond the handler timeout: only a backstop
 * for when the cancel of a stuck handler's statement cannot be sent.
 */
export const STATEMENT_GRACE_MS = 2000;

/**
 * Whether a batch transaction that has run `ran` tasks stops starting more (they get the next
 * transaction): past its time budget, at MAX_SAVEPOINTS, or when the worker is stopping. The first
 * task always runs.
 */
export function batchTransactionFull(s: { ran: number; elapsedMs: number; savepoints: number; stopping: boolean }): boolean {
  return s.ran > 0 && (s.elapsedMs > TX_BUDGET_MS || s.savepoints >= MAX_SAVEPOINTS || s.stopping);
}
