import type { SqlExecutor } from '../types';
import { backOffStatements, type BackOffScope } from './backoff.sql';

/** A cooldown in force (see backoff.sql.ts): a queue, a partition of it, or a named limiter, not claimed until `until`. */
export interface Cooldown {
  scope: BackOffScope;
  /** The queue, or the limiter for scope 'limiter'. */
  name: string;
  /** Scope 'partition': the partition ('' for the tasks without one); else null. */
  partition: string | null;
  until: Date;
  /** The error text of the RateLimitedError that set the latest-ending cooldown. */
  reason: string | null;
}
/** @deprecated Renamed Cooldown; this name goes in the next release. */
export type BackOffInForce = Cooldown;

/** Reads the back-offs in force; the only caller of backoff.sql.ts's statements outside the claim and the lease-ending ones. */
export class BackOffRepository {
  private readonly sql;

  constructor(schema: string) {
    this.sql = backOffStatements(schema);
  }

  async list(db: SqlExecutor): Promise<Cooldown[]> {
    const rows = await db.$queryRawUnsafe<{ scope: BackOffScope; name: string; partition_key: string; until: Date; reason: string | null }[]>(this.sql.list);
    return rows.map((r) => ({ scope: r.scope, name: r.name, partition: r.scope === 'partition' ? r.partition_key : null, until: new Date(r.until), reason: r.reason }));
  }
}
