import type { Client } from 'pg';
import { Queue, Worker, createPostgresBackend, type PostgresPoolConfig, type WorkerOptions } from 'bullmq';
import { QUEUE, poolSize, type BenchTarget, type Payload, type TargetOptions } from '../common';

const JOB_NAME = 'noop';

// Built through these so TypeScript infers the PostgreSQL backend's types from the factory, as the
// guide's examples do.
const makeQueue = (connection: PostgresPoolConfig) => new Queue(QUEUE, { connection }, createPostgresBackend);
const makeWorker = (handler: (payload: Payload) => void, opts: WorkerOptions<PostgresPoolConfig>) =>
  new Worker(QUEUE, async (job) => handler(job.data as Payload), opts, createPostgresBackend);

/**
 * What the production row keeps of finished jobs: the production guide's "most common
 * configuration", a handful of completed jobs (docs.bullmq.io/guide/going-to-production, "Auto-job
 * removal", pointing to the auto-removal page's "Keep a certain number of jobs" example).
 */
export const BULLMQ_PRODUCTION = { removeOnComplete: { count: 1000 }, removeOnFail: { count: 5000 } } as const;

/**
 * BullMQ 6 on its PostgreSQL backend (docs.bullmq.io/guide/postgresql): `Queue` and `Worker` built
 * with `createPostgresBackend` as the last constructor argument and a node-postgres pool config as
 * `connection`, carrying `migrate: true` (the schema, `bullmq`, is installed on first connect) and
 * `max` max(10, C + 2) (its tuning tip: a pool sized for the worker's concurrency); the Worker at
 * `concurrency` C. Two rows:
 * - `production` (the default here): the Worker's `removeOnComplete: { count: 1000 }`,
 *   `removeOnFail: { count: 5000 }`, as its production guide advises;
 * - `defaults`: no removal, BullMQ's default (every completed job kept in the job table forever).
 * Everything else is BullMQ's default (lock duration 30 s, stalled check every 30 s, drainDelay
 * 5 s as the LISTEN wait's bound, the fused "complete + fetch next" path). The Queue and the Worker
 * each own their backend: a pool and one dedicated LISTEN connection each.
 */
export class BullMqTarget implements BenchTarget {
  /**
   * The statements that claim: `move_to_active` (a slot's first claim) and the fused
   * `move_to_completed_fetch` / `move_to_failed_fetch` that finish a job and claim the next in one
   * call, which most claims of a drain are (so the figure includes the completion).
   */
  readonly claimStatementPattern = '%FROM move_to_%';
  private queue: ReturnType<typeof makeQueue> | null = null;
  private worker: ReturnType<typeof makeWorker> | null = null;
  private readonly production: boolean;

  constructor(private readonly opts: TargetOptions) {
    this.production = opts.preset !== 'defaults';
  }

  private connection(): PostgresPoolConfig {
    return { connectionString: this.opts.url, max: poolSize(this.opts.concurrency), migrate: true };
  }

  describe(): string {
    const removal = this.production ? `, removeOnComplete: ${JSON.stringify(BULLMQ_PRODUCTION.removeOnComplete)}, removeOnFail: ${JSON.stringify(BULLMQ_PRODUCTION.removeOnFail)}` : ' (no removeOnComplete / removeOnFail: the default, finished jobs kept)';
    return `connection = { connectionString, max: ${poolSize(this.opts.concurrency)}, migrate: true }; new Queue('${QUEUE}', { connection }, createPostgresBackend); new Worker('${QUEUE}', handler, { connection, concurrency: ${this.opts.concurrency}${removal} }, createPostgresBackend); queue.add / queue.addBulk`;
  }

  async open(): Promise<void> {
    this.queue = makeQueue(this.connection());
    this.queue.on('error', (err: Error) => console.error(`bullmq queue error: ${err.message}`));
    await this.queue.waitUntilReady();
  }

  async enqueueOne(payload: Payload): Promise<void> {
    await this.queue!.add(JOB_NAME, payload);
  }

  async enqueueMany(items: Payload[]): Promise<void> {
    await this.queue!.addBulk(items.map((data) => ({ name: JOB_NAME, data })));
  }

  async startWorker(onTask: (payload: Payload) => void): Promise<void> {
    this.worker = makeWorker(onTask, { connection: this.connection(), concurrency: this.opts.concurrency, ...(this.production ? BULLMQ_PRODUCTION : {}) });
    this.worker.on('error', (err: Error) => console.error(`bullmq worker error: ${err.message}`));
    await this.worker.waitUntilReady();
  }

  async unfinished(db: Client): Promise<number> {
    const r = await db.query(`SELECT count(*)::int AS n FROM bullmq.job WHERE queue = $1 AND state NOT IN ('completed', 'failed')`, [QUEUE]);
    return r.rows[0].n;
  }

  /**
   * The no-op handler never throws, so a failed job is one whose completion failed: with
   * `removeOnComplete: { count }` the completing call can die with `deadlock detected`, and the
   * Worker then moves the handled job to `failed` with that reason (the production row shows it).
   * Counted as finished (it is no longer pending) and reported in the run's notes.
   */
  async failedAfterHandler(db: Client): Promise<number> {
    const r = await db.query(`SELECT count(*)::int AS n FROM bullmq.job WHERE queue = $1 AND state = 'failed'`, [QUEUE]);
    return r.rows[0].n;
  }

  async stored(db: Client): Promise<number> {
    const r = await db.query(`SELECT count(*)::int AS n FROM bullmq.job WHERE queue = $1`, [QUEUE]);
    return r.rows[0].n;
  }

  /**
   * History: `n` jobs added through addBulk (its own SQL function) and set to `completed` as
   * completion leaves them (attempts, processed/finished times, return value); the production row then deletes
   * all but the newest 1 000 (what removeOnComplete's count would have left, with the id counter
   * and the table's and indexes' files grown as they would), the defaults row keeps them all. Then
   * VACUUM ANALYZE.
   */
  async insertHistory(db: Client, n: number): Promise<void> {
    if (n > 0) {
      for (let from = 0; from < n; from += 50_000) {
        const entries = Array.from({ length: Math.min(50_000, n - from) }, (_, i) => ({ name: JOB_NAME, data: { seq: from + i } }));
        await this.queue!.addBulk(entries);
      }
      await db.query(
        `UPDATE bullmq.job SET state = 'completed', attempts_made = 1, attempts_started = 1,
                processed_at_ms = added_at_ms, finished_at_ms = added_at_ms + 3, return_value = 'null'::jsonb
         WHERE queue = $1`,
        [QUEUE],
      );
      if (this.production) {
        await db.query(
          `DELETE FROM bullmq.job WHERE queue = $1 AND id NOT IN (SELECT id FROM bullmq.job WHERE queue = $1 ORDER BY seq DESC LIMIT $2)`,
          [QUEUE, BULLMQ_PRODUCTION.removeOnComplete.count],
        );
      }
    }
    await db.query('VACUUM ANALYZE bullmq.job');
  }

  async close(): Promise<void> {
    await this.worker?.close();
    await this.queue?.close();
  }
}
