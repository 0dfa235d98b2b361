import type { SqlExecutor } from '../types';
import { drainStatements } from './drain.sql';

/** What is left in one drained queue (see `left` in drain.sql.ts). */
export interface DrainLeft {
  queue: string;
  due: number;
  running: number;
  expired: number;
  waiting: number;
  /** Workflows parked (sleeping, waiting for a signal or a child). */
  parked: number;
  unsettled: number;
}

/** Runs the statements of the test helper `drainQueue` (see drain.sql.ts). */
export class DrainRepository {
  private readonly sql;

  constructor(schema: string) {
    this.sql = drainStatements(schema);
  }

  /** Makes the pending tasks of `queues` that are due later due now; returns how many. */
  async runDelayedNow(db: SqlExecutor, queues: readonly string[]): Promise<number> {
    const [r] = await db.$queryRawUnsafe<{ moved: number }[]>(this.sql.runDelayedNow, queues);
    return r.moved;
  }

  /** Per queue of `queues`, what is left (queues with nothing left are left out). */
  async left(db: SqlExecutor, queues: readonly string[], allPending: boolean): Promise<DrainLeft[]> {
    const rows = await db.$queryRawUnsafe<DrainLeft[]>(this.sql.left, queues, allPending);
    return rows.filter((r) => r.due + r.running + r.expired + r.waiting + r.parked + r.unsettled > 0);
  }

  /** Queues outside `queues` with pending tasks (due ones, or all when `allPending`), and how many. */
  async undrained(db: SqlExecutor, queues: readonly string[], allPending: boolean): Promise<{ queue: string; pending: number }[]> {
    return db.$queryRawUnsafe<{ queue: string; pending: number }[]>(this.sql.undrained, queues, allPending);
  }
}
