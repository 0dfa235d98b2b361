import type { PrismaClientLike, SqlExecutor } from '../types';
import { inBoundedTransaction, type TransactionBounds } from './bounded-transaction';
import { watchStatements } from './watch.sql';

/**
 * The mark's bounds: its UPDATE waits for the task row's lock, held only by statements that end or
 * claim the task (milliseconds) or by a transaction that enqueues a dependant of it (bounded too).
 */
const MARK_BOUNDS: TransactionBounds = { maxWaitMs: 5000, lockWaitMs: 10_000, idleMs: 5000, statementMs: 15_000, transactionMs: 20_000, perRowMs: 0 };

/** Runs the statements of task_watch and task.watched (see watch.sql.ts); the only caller of its SQL. */
export class WatchRepository {
  private readonly sql;

  constructor(schema: string) {
    this.sql = watchStatements(schema);
  }

  async mark(db: PrismaClientLike, id: string): Promise<void> {
    await inBoundedTransaction(db, 'waitFor', MARK_BOUNDS, 1, async (tx) => { await tx.$executeRawUnsafe(this.sql.mark, id); });
  }

  async subscribe(db: SqlExecutor, subscriber: string, queues: string[], ttlMs: number): Promise<void> {
    await db.$executeRawUnsafe(this.sql.subscribe, subscriber, queues, ttlMs);
  }

  async unsubscribe(db: SqlExecutor, subscriber: string): Promise<void> {
    await db.$executeRawUnsafe(this.sql.unsubscribe, subscriber);
  }
}
