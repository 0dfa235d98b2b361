import type { PrismaClientLike, SqlExecutor } from '../types';
import { notifyChannel } from './identifiers';
import { pauseStatements } from './pause.sql';

/** A pause: a whole queue (`partition` null) or one partition of it. */
export interface QueuePause {
  queue: string;
  partition: string | null;
  pausedAt: Date;
}

/** Runs the statements of queue_pause (see pause.sql.ts); the only caller of its SQL. */
export class PauseRepository {
  private readonly sql;
  private readonly channel: string;

  constructor(schema: string) {
    this.sql = pauseStatements(schema);
    this.channel = notifyChannel(schema);
  }

  /** True when this call paused it, false when it already was. Waits for the queue's claims in flight (see pause.sql.ts). */
  pause(db: PrismaClientLike, queue: string, partition: string | null): Promise<boolean> {
    return db.$transaction(async (tx: SqlExecutor) => {
      await tx.$executeRawUnsafe(this.sql.lockTimeout);
      await tx.$executeRawUnsafe(this.sql.lock);
      const [row] = await tx.$queryRawUnsafe<{ paused: boolean }[]>(this.sql.pause, queue, partition ?? '', this.channel);
      return row.paused;
    });
  }

  /** True when this call resumed it, false when it was not paused. */
  async resume(db: SqlExecutor, queue: string, partition: string | null): Promise<boolean> {
    const [row] = await db.$queryRawUnsafe<{ resumed: boolean }[]>(this.sql.resume, queue, partition ?? '', this.channel);
    return row.resumed;
  }

  async list(db: SqlExecutor): Promise<QueuePause[]> {
    const rows = await db.$queryRawUnsafe<{ queue: string; partition_key: string; paused_at: Date }[]>(this.sql.list);
    return rows.map((r) => ({ queue: r.queue, partition: r.partition_key === '' ? null : r.partition_key, pausedAt: new Date(r.paused_at) }));
  }
}
