import type { Client } from 'pg';
import { PgBoss } from 'pg-boss';
import { QUEUE, poolSize, type BenchTarget, type Payload, type TargetOptions } from '../common';

/** Jobs per fetch: pg-queue's default batchSize (its ceiling per claim), so both may claim the same batches. */
export const PG_BOSS_BATCH_SIZE = 500;

/**
 * pg-boss (current major) with its documented throughput and latency settings:
 * - `localConcurrency: C` workers per process, each fetching `batchSize` jobs per fetch;
 * - `burstWhenBatchFull: true`: keep fetching without the polling delay while fetches come back full
 *   (without it every worker sleeps `pollingIntervalSeconds`, 2 s, after each batch);
 * - `useListenNotify: true` on the instance and `notify: true` on the queue: workers are woken by
 *   NOTIFY instead of waiting for their poll.
 * Everything else is pg-boss's default (supervision, maintenance, monitoring, retention of completed
 * jobs for 7 days in the job table).
 */
export class PgBossTarget implements BenchTarget {
  readonly claimStatementPattern = '%FOR UPDATE OF j SKIP LOCKED%';
  private boss: PgBoss | null = null;

  constructor(private readonly opts: TargetOptions) {}

  describe(): string {
    return `new PgBoss({ connectionString, max: ${poolSize(this.opts.concurrency)}, useListenNotify: true }); createQueue('${QUEUE}', { notify: true }); work('${QUEUE}', { localConcurrency: ${this.opts.concurrency}, batchSize: ${PG_BOSS_BATCH_SIZE}, burstWhenBatchFull: true }, handler)`;
  }

  async open(): Promise<void> {
    this.boss = new PgBoss({ connectionString: this.opts.url, max: poolSize(this.opts.concurrency), useListenNotify: true });
    this.boss.on('error', (err: Error) => console.error(`pg-boss error: ${err.message}`));
    await this.boss.start();
    await this.boss.createQueue(QUEUE, { notify: true });
  }

  async enqueueOne(payload: Payload): Promise<void> {
    await this.boss!.send(QUEUE, payload);
  }

  async enqueueMany(items: Payload[]): Promise<void> {
    await this.boss!.insert(QUEUE, items.map((data) => ({ data })));
  }

  async startWorker(onTask: (payload: Payload) => void): Promise<void> {
    await this.boss!.work<Payload>(
      QUEUE,
      { localConcurrency: this.opts.concurrency, batchSize: PG_BOSS_BATCH_SIZE, burstWhenBatchFull: true },
      async (jobs) => {
        for (const job of jobs) onTask(job.data);
      },
    );
  }

  async unfinished(db: Client): Promise<number> {
    const r = await db.query(`SELECT count(*)::int AS n FROM pgboss.job WHERE name = $1 AND state IN ('created', 'retry', 'active', 'failed')`, [QUEUE]);
    return r.rows[0].n;
  }

  async stored(db: Client): Promise<number> {
    const r = await db.query(`SELECT count(*)::int AS n FROM pgboss.job WHERE name = $1`, [QUEUE]);
    return r.rows[0].n;
  }

  /**
   * pg-boss keeps completed jobs in the job table (the one fetch reads) until deleteAfterSeconds
   * (7 days by default). History = `n` rows in state `completed` with the queue's settings, as
   * pg-boss's own insert writes them, created/started/completed over the last 5 days. Inserted
   * directly in their final state (their created → active → completed updates would have left only
   * dead tuples that vacuum reclaims), then VACUUM ANALYZE.
   */
  async insertHistory(db: Client, n: number): Promise<void> {
    if (n > 0) {
      await db.query(
        `INSERT INTO pgboss.job (name, data, priority, state, retry_limit, retry_backoff, retry_delay, retry_delay_max, expire_seconds,
                                 deletion_seconds, policy, start_after, created_on, started_on, completed_on, keep_until)
         SELECT q.name, jsonb_build_object('seq', g), 0, 'completed', q.retry_limit, q.retry_backoff, q.retry_delay, q.retry_delay_max,
                q.expire_seconds, q.deletion_seconds, q.policy, t.at, t.at, t.at + interval '3 ms', t.at + interval '5 ms',
                t.at + q.retention_seconds * interval '1 second'
         FROM pgboss.queue q
         CROSS JOIN generate_series(1, $2::int) g
         CROSS JOIN LATERAL (SELECT now() - interval '5 days' + g * (interval '5 days' / $2)) AS t(at)
         WHERE q.name = $1`,
        [QUEUE, n],
      );
    }
    await db.query('VACUUM ANALYZE pgboss.job');
  }

  async close(): Promise<void> {
    await this.boss?.stop({ graceful: true, timeout: 10_000, close: true });
  }
}
