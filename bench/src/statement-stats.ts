import type { Client } from 'pg';
import { connect } from './common';
import type { ScaleProbe, ServerTotals } from './scale';

/** pg_stat_statements, read from the admin database and filtered to the run's database. */
export class StatementStats implements ScaleProbe {
  private constructor(private readonly admin: Client, private readonly dbName: string) {}

  static async open(adminUrl: string, dbName: string): Promise<StatementStats | null> {
    const admin = await connect(adminUrl);
    try {
      await admin.query('SELECT 1 FROM pg_stat_statements LIMIT 1');
      return new StatementStats(admin, dbName);
    } catch {
      await admin.end();
      return null;
    }
  }

  async reset(): Promise<void> {
    await this.admin.query('SELECT pg_stat_statements_reset()');
  }

  /**
   * From here on, the run's database also counts statements run inside functions (the limited
   * claim's, inside claim_limited), for connections opened after this. Needs a superuser; without
   * one those statements go uncounted (the claim's server time then reads n/a), which it says.
   */
  async trackNested(): Promise<void> {
    await this.admin.query(`ALTER DATABASE ${this.dbName} SET pg_stat_statements.track = 'all'`).catch((err: Error) => {
      console.error(`   statement counts: cannot count statements inside functions (${err.message}): the limited claims' server time is n/a`);
    });
  }

  /** Statements executed in the run's database since the reset (the admin connection's own are in another database). */
  async read(claimPattern: string): Promise<{ calls: number; claimCalls: number; claimMs: number; top: { calls: number; query: string }[] }> {
    const where = `dbid = (SELECT oid FROM pg_database WHERE datname = $1) AND query NOT ILIKE '%pg_stat_statements%'`;
    const sum = await this.admin.query(
      `SELECT coalesce(sum(calls), 0)::bigint AS calls,
              coalesce(sum(calls) FILTER (WHERE query ILIKE $2), 0)::bigint AS claim_calls,
              coalesce(sum(total_exec_time) FILTER (WHERE query ILIKE $2), 0)::float8 AS claim_ms
       FROM pg_stat_statements WHERE ${where}`,
      [this.dbName, claimPattern],
    );
    const top = await this.admin.query(
      `SELECT calls::bigint AS calls, regexp_replace(left(query, 400), '\\s+', ' ', 'g') AS query
       FROM pg_stat_statements WHERE ${where} ORDER BY calls DESC LIMIT 6`,
      [this.dbName],
    );
    return {
      calls: Number(sum.rows[0].calls),
      claimCalls: Number(sum.rows[0].claim_calls),
      claimMs: Number(sum.rows[0].claim_ms),
      top: top.rows.map((r) => ({ calls: Number(r.calls), query: r.query })),
    };
  }

  /** Every statement executed in the run's database since the reset: calls, execution time, shared buffers. */
  async totals(): Promise<ServerTotals> {
    const r = await this.admin.query(
      `SELECT coalesce(sum(calls), 0)::bigint AS calls, coalesce(sum(total_exec_time), 0)::float8 AS exec_ms,
              coalesce(sum(shared_blks_hit + shared_blks_read), 0)::bigint AS blocks
       FROM pg_stat_statements
       WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) AND query NOT ILIKE '%pg_stat_statements%'`,
      [this.dbName],
    );
    return { calls: Number(r.rows[0].calls), execMs: Number(r.rows[0].exec_ms), blocks: Number(r.rows[0].blocks) };
  }

  close(): Promise<void> {
    return this.admin.end();
  }
}
