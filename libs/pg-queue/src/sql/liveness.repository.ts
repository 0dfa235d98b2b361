import type { SqlExecutor } from '../types';
import { databaseError } from './database-error';
import { notifyChannel } from './identifiers';
import { livenessStatements } from './liveness.sql';

/** What one pass of `rescueGone` did (see liveness.sql.ts). */
export interface GoneRescue {
  rescued: number;
  dead: number;
  /** Instances judged dead in this pass (their tasks rescued now or in the next). */
  gone: number;
  /** When to look again for an instance found gone and not yet judged (ms from now; null: none). */
  nextCheckMs: number | null;
}

/** Runs the statements of instance_session (see liveness.sql.ts); the only caller of its SQL. */
export class LivenessRepository {
  private readonly sql;
  private readonly channel: string;

  constructor(schema: string) {
    this.sql = livenessStatements(schema);
    this.channel = notifyChannel(schema);
  }

  /** Records that `instance`'s listener session is up as `listener`; false when no such session shows. */
  async register(db: SqlExecutor, instance: string, listener: string, windows: { graceMs: number; silentMs: number }): Promise<boolean> {
    const rows = await schemaCurrent(db.$queryRawUnsafe<{ registered: number }[]>(this.sql.register, instance, listener, windows.graceMs, windows.silentMs));
    return rows.length > 0;
  }

  /** `instance` is alive, its LISTEN session gone: not to be judged for `ms`. */
  async reconnecting(db: SqlExecutor, instance: string, ms: number): Promise<void> {
    await schemaCurrent(db.$executeRawUnsafe(this.sql.reconnecting, instance, ms));
  }

  async retire(db: SqlExecutor, instance: string): Promise<void> {
    await db.$executeRawUnsafe(this.sql.retire, instance);
  }

  /**
   * Rescues the running tasks of the instances (other than `self`) judged dead; `trusted`: whether
   * this judge applies their silent window rather than their grace (see liveness.sql.ts).
   */
  async rescueGone(db: SqlExecutor, self: string, trusted: boolean, limit = 1000): Promise<GoneRescue> {
    const [res] = await schemaCurrent(
      db.$queryRawUnsafe<{ rescued: number; dead: number; gone: number; next_check_ms: number | null }[]>(this.sql.rescueGone, limit, this.channel, self, trusted),
    );
    return { rescued: res.rescued, dead: res.dead, gone: res.gone, nextCheckMs: res.next_check_ms };
  }
}

/** A schema older than migration 25 (installSchema false, not upgraded yet) said plainly. */
async function schemaCurrent<T>(statement: PromiseLike<T>): Promise<T> {
  try {
    return await statement;
  } catch (err) {
    if (databaseError(err)?.code !== '42703') throw err;
    throw new Error(
      `instance_session lacks the columns of schema migration 25 (this database's queue schema is older than this instance): ` +
        `run \`pg-queue schema install\` or apply the printed schema SQL; until then dead instances' claims wait for their leases`,
    );
  }
}
