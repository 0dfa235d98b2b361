import { PgQueueError } from '../errors';
import type { PrismaClientLike, SqlExecutor, TransactionOptionsLike } from '../types';

/**
 * The library's lock decisions need READ COMMITTED: each statement of a transaction takes a fresh
 * snapshot, so a statement after a lock sees what committed before the lock was granted. Asking
 * Prisma for the level costs a round trip per transaction (`SET TRANSACTION ISOLATION LEVEL` after
 * BEGIN), although nearly every database runs READ COMMITTED by default. So the first statement of
 * such a transaction reports the level it runs under (`ISOLATION`, a column of its result); under
 * another level the transaction is rolled back and run again with the level set, as is every later
 * one through the same client.
 */

/** A select-list item for the transaction's first statement: the isolation level it runs under. */
export const ISOLATION = `current_setting('transaction_isolation') AS isolation`;

/** Clients whose database does not run READ COMMITTED by default: their transactions set it. */
const setsLevel = new WeakSet<object>();

class NotReadCommitted extends PgQueueError {}

/** Throws (rolling the transaction back) unless the first statement's row says READ COMMITTED. */
export function assertReadCommitted(row: { isolation: string } | undefined): void {
  if (row?.isolation !== 'read committed') throw new NotReadCommitted(`pg-queue: transaction runs under ${row?.isolation ?? 'an unknown isolation level'}, not read committed`);
}

/**
 * Runs `work` in a READ COMMITTED transaction of `root`. `work`'s first statement must select
 * ISOLATION and pass its row to assertReadCommitted before it relies on the level.
 */
export async function inReadCommitted<T>(root: PrismaClientLike, options: Omit<TransactionOptionsLike, 'isolationLevel'>, work: (tx: SqlExecutor) => Promise<T>): Promise<T> {
  const explicit = setsLevel.has(root);
  try {
    return await root.$transaction(work, explicit ? { ...options, isolationLevel: 'ReadCommitted' } : options);
  } catch (err) {
    if (!(err instanceof NotReadCommitted) || explicit) throw err;
    setsLevel.add(root);
    return root.$transaction(work, { ...options, isolationLevel: 'ReadCommitted' });
  }
}

/**
 * Runs `call`, one statement whose row reports the isolation level it ran under and which does
 * nothing under another than READ COMMITTED (claim_limited): on its own, so in an implicit
 * transaction of the database's default level; where that is another level, in a READ COMMITTED
 * transaction of `root`, from then on for every call through it.
 */
export async function readCommittedCall<T extends { isolation: string }>(
  root: PrismaClientLike,
  options: Omit<TransactionOptionsLike, 'isolationLevel'>,
  call: (db: SqlExecutor) => Promise<T>,
): Promise<T> {
  if (!setsLevel.has(root)) {
    const row = await call(root);
    if (row.isolation === 'read committed') return row;
    setsLevel.add(root);
  }
  return root.$transaction(async (tx) => {
    const row = await call(tx);
    assertReadCommitted(row);
    return row;
  }, { ...options, isolationLevel: 'ReadCommitted' });
}
