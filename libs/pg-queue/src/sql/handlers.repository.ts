import type { PrismaClientLike, SqlExecutor } from '../types';
import { handlerStatements } from './handlers.sql';
import { JIT_OFF } from './inspect.fragments';

/** A queue with due tasks and no running instance handling it (see `pass` in handlers.sql.ts). */
export interface UnhandledQueue {
  queue: string;
  /** Counted up to the cap given to `pass`. */
  due: number;
  unhandledMs: number;
}

/** Runs the statements of queue_handler (see handlers.sql.ts); the only caller of its SQL. */
export class HandlerRepository {
  private readonly sql;

  constructor(schema: string) {
    this.sql = handlerStatements(schema);
  }

  /**
   * Renews this instance's rows for `queues`; returns the queues nobody handles (see `pass`). With
   * JIT off, as the metrics scrape (the same loose index scan; see JIT_OFF): every instance runs it
   * on every periodic pass.
   */
  async pass(db: PrismaClientLike, p: { instance: string; queues: readonly string[]; ttlMs: number; graceMs: number; countCap: number }): Promise<UnhandledQueue[]> {
    const rows = await db.$transaction(async (tx: SqlExecutor) => {
      await tx.$executeRawUnsafe(JIT_OFF);
      return tx.$queryRawUnsafe<{ queue: string; due: number; unhandled_ms: number }[]>(this.sql.pass, p.queues, p.instance, p.ttlMs, p.graceMs, p.countCap);
    });
    return rows.map((r) => ({ queue: r.queue, due: r.due, unhandledMs: r.unhandled_ms }));
  }

  /** Marks this instance's rows expired (at its shutdown). */
  async retire(db: SqlExecutor, instance: string): Promise<void> {
    await db.$executeRawUnsafe(this.sql.retire, instance);
  }
}
