import type { PrismaClientLike, SqlExecutor } from '../types';
import { databaseError } from './database-error';
import { handlerStatements } from './handlers.sql';
import { JIT_OFF } from './inspect.fragments';

/** A queue with due tasks and no running instance handling it (see `pass` in handlers.sql.ts). */
export interface UnhandledQueue {
  queue: string;
  /** Counted up to the cap given to `pass`. */
  due: number;
  unhandledMs: number;
}

/** Passes that run the transaction before handler_pass is tried again after it was missing. */
const FUNCTION_RETRY_PASSES = 30;

/** Runs the statements of queue_handler (see handlers.sql.ts); the only caller of its SQL. */
export class HandlerRepository {
  private readonly sql;

  constructor(schema: string) {
    this.sql = handlerStatements(schema);
  }

  /** Passes left before handler_pass is tried again, after it answered as missing (a schema installed from an older release's SQL). */
  private withoutFunction = 0;

  /**
   * Renews this instance's rows for `queues`; returns the queues nobody handles (see passSql). With
   * JIT off, as the metrics scrape (the same loose index scan; see JIT_OFF): one statement, the
   * runtime function handler_pass; where it is missing, the same SQL in a transaction that sets
   * JIT off first.
   */
  async pass(db: PrismaClientLike, p: { instance: string; queues: readonly string[]; ttlMs: number; graceMs: number; countCap: number }): Promise<UnhandledQueue[]> {
    const params = [p.queues, p.instance, p.ttlMs, p.graceMs, p.countCap] as const;
    let rows: { queue: string; due: number; unhandled_ms: number }[] | null = null;
    if (this.withoutFunction > 0) this.withoutFunction--;
    else {
      try {
        rows = await db.$queryRawUnsafe(this.sql.passByFunction, ...params);
      } catch (err) {
        if (databaseError(err)?.code !== '42883') throw err;
        this.withoutFunction = FUNCTION_RETRY_PASSES; // until then: a schema install may put it in place
      }
    }
    rows ??= await db.$transaction(async (tx: SqlExecutor) => {
      await tx.$executeRawUnsafe(JIT_OFF);
      return tx.$queryRawUnsafe<{ queue: string; due: number; unhandled_ms: number }[]>(this.sql.pass, ...params);
    });
    return rows.map((r) => ({ queue: r.queue, due: r.due, unhandledMs: r.unhandled_ms }));
  }

  /** Marks this instance's rows expired (at its shutdown). */
  async retire(db: SqlExecutor, instance: string): Promise<void> {
    await db.$executeRawUnsafe(this.sql.retire, instance);
  }
}
