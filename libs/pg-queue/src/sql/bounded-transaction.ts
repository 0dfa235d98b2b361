import { PgQueueError } from '../errors';
import type { PrismaClientLike, SqlExecutor } from '../types';
import { databaseError } from './database-error';
import { marked } from './fragments.sql';
import { assertReadCommitted, inReadCommitted, ISOLATION } from './read-committed';

/**
 * Bounds of a transaction the library opens on its own for work that may wait for other
 * transactions' row locks (enqueue with dependants, a completion with such follow-ups), instead of
 * Prisma's defaults and the database's (often none).
 */
export interface TransactionBounds {
  /** The wait for a pool connection to start it (Prisma's maxWait). */
  readonly maxWaitMs: number;
  /** The wait for any one lock (lock_timeout). */
  readonly lockWaitMs: number;
  /** Idle time between its statements before the server ends the session (a stalled process). */
  readonly idleMs: number;
  /** Any one statement's run, lock waits included (statement_timeout). */
  readonly statementMs: number;
  /** The whole transaction (Prisma's timeout): this, plus `perRowMs` per row it writes. */
  readonly transactionMs: number;
  readonly perRowMs: number;
}

/**
 * A statement on one task's row that may wait for its lock (waitFor's mark, promote, reschedule,
 * updatePayload): held by statements that claim or end the task (milliseconds) or by a transaction
 * that enqueues a dependant of it (bounded too).
 */
export const ONE_ROW_BOUNDS: TransactionBounds = { maxWaitMs: 5000, lockWaitMs: 10_000, idleMs: 5000, statementMs: 15_000, transactionMs: 20_000, perRowMs: 0 };

/**
 * The transaction's first statement: the server-side bounds, for this transaction only, and the
 * isolation level it runs under (read-committed.ts). Parameters: the bounds in ms, as text.
 */
export const BOUND = marked({
  statement: `
SELECT set_config('lock_timeout', $1, true), set_config('idle_in_transaction_session_timeout', $2, true),
       set_config('statement_timeout', $3, true), ${ISOLATION}`,
}).statement;

/**
 * Runs `work` in a transaction of its own under `b` (`rows`: how many rows it writes), READ
 * COMMITTED whatever the database's default (each statement takes a fresh snapshot, which the lock
 * decisions rely on; see read-committed.ts). A lock wait or statement that passes its bound fails as a PgQueueError
 * naming `what` and the bound; the transaction is rolled back.
 */
export async function inBoundedTransaction<T>(root: PrismaClientLike, what: string, b: TransactionBounds, rows: number, work: (tx: SqlExecutor) => Promise<T>): Promise<T> {
  try {
    return await inReadCommitted(root, { maxWait: b.maxWaitMs, timeout: b.transactionMs + b.perRowMs * rows }, async (tx: SqlExecutor) => {
      const [level] = await tx.$queryRawUnsafe<{ isolation: string }[]>(BOUND, String(b.lockWaitMs), String(b.idleMs), String(b.statementMs));
      assertReadCommitted(level);
      return work(tx);
    });
  } catch (err) {
    throw boundPassed(err, what, b) ?? err;
  }
}

/** The error for a lock wait or statement past its bound, or null for any other failure. */
function boundPassed(err: unknown, what: string, b: TransactionBounds): PgQueueError | null {
  const db = databaseError(err);
  const reason =
    db?.code === '55P03'
      ? `gave up waiting for a row lock after ${b.lockWaitMs} ms (lock_timeout): another transaction holds a row it needs, such as a task it depends on while that task completes or while a transaction that enqueued a dependant of it is open`
      : db?.code === '57014' && /statement timeout/i.test(db.message)
        ? `ran past its bound of ${b.statementMs} ms for one statement (statement_timeout), lock waits included`
        : null;
  if (reason === null) return null;
  const out = new PgQueueError(`pg-queue: ${what} ${reason}; its transaction was rolled back`);
  out.cause = err;
  return out;
}
