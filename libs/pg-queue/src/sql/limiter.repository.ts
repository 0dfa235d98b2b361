import type { ResolvedLimiters } from '../limiter.options';
import type { SqlExecutor } from '../types';
import { limiterStatements } from './limiter.sql';

/** A named limiter's budget and how much of it is in use now (TaskQueue.limiterBudgets). */
export interface LimiterBudget {
  name: string;
  concurrency: number | null;
  /** Tasks of the limiter's queues running now, on every instance. */
  running: number;
  rateLimit: { max: number; perMs: number } | null;
  /** Tasks started inside the current rate window. */
  windowCount: number;
  /** When the limiter's cooldown ends (null: it is not cooling down). */
  cooldownUntil: Date | null;
  /** @deprecated Renamed cooldownUntil; this name goes in the next release. */
  backedOffUntil: Date | null;
}

/**
 * The named limiters outside the claim (limiter.sql.ts; the claim reads them in LimitsRepository):
 * which queues use which, registered at an instance's start, and each one's budget in use, for
 * the dashboard, the metrics and TaskQueue.limiterBudgets.
 */
export class LimiterRepository {
  private readonly sql;

  constructor(
    schema: string,
    /** The module's named limiters. */
    private readonly limiters: ResolvedLimiters,
  ) {
    this.sql = limiterStatements(schema);
  }

  /** At start: which queues handled here use which limiter (see `register` in limiter.sql.ts). */
  async register(db: SqlExecutor, handlers: { queue: string; limiter: string | null }[]): Promise<void> {
    if (handlers.length === 0) return;
    await db.$executeRawUnsafe(this.sql.register, handlers.map((h) => h.queue), handlers.map((h) => h.limiter ?? ''));
  }

  /** Each configured limiter's budget in use. */
  async budgets(db: SqlExecutor): Promise<LimiterBudget[]> {
    const all = [...this.limiters.values()];
    if (all.length === 0) return [];
    const rows = await db.$queryRawUnsafe<{ name: string; running: number; window_count: number; backed_off_until: Date | null }[]>(
      this.sql.budgets, all.map((l) => l.name), all.map((l) => l.rateLimit?.perMs ?? 0),
    );
    return rows.map((r) => {
      const l = this.limiters.get(r.name)!;
      const cooldownUntil = r.backed_off_until === null ? null : new Date(r.backed_off_until);
      return { name: r.name, concurrency: l.concurrency, running: r.running, rateLimit: l.rateLimit, windowCount: r.window_count, cooldownUntil, backedOffUntil: cooldownUntil };
    });
  }
}
