import type { PrismaClientLike, SqlExecutor } from '../types';
import { inBoundedTransaction, ONE_ROW_BOUNDS } from './bounded-transaction';
import { notifyChannel } from './identifiers';
import { watchStatements } from './watch.sql';

/** Runs the statements of task_watch and task.watched (see watch.sql.ts); the only caller of its SQL. */
export class WatchRepository {
  private readonly sql;
  private readonly channel: string;

  constructor(schema: string) {
    this.sql = watchStatements(schema);
    this.channel = notifyChannel(schema);
  }

  async mark(db: PrismaClientLike, id: string): Promise<void> {
    await inBoundedTransaction(db, 'waitFor', ONE_ROW_BOUNDS, 1, async (tx) => { await tx.$queryRawUnsafe(this.sql.mark, id, this.channel); });
  }

  async subscribe(db: SqlExecutor, subscriber: string, queues: string[], ttlMs: number): Promise<void> {
    await db.$executeRawUnsafe(this.sql.subscribe, subscriber, queues, ttlMs);
  }

  async unsubscribe(db: SqlExecutor, subscriber: string): Promise<void> {
    await db.$executeRawUnsafe(this.sql.unsubscribe, subscriber);
  }
}
