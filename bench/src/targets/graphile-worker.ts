import type { Client } from 'pg';
import { Logger, makeWorkerUtils, run, type Runner, type WorkerUtils } from 'graphile-worker';
import { QUEUE, poolSize, type BenchTarget, type Payload, type TargetOptions } from '../common';

/** graphile-worker's performance page configuration (worker.graphile.org/docs/performance). */
export const GRAPHILE_PRESET = {
  localQueue: { size: 500 },
  completeJobBatchDelay: 0,
  failJobBatchDelay: 0,
};

const quiet = new Logger(() => (level, message) => {
  if (level === 'error') console.error(`graphile-worker: ${message}`);
});

/**
 * graphile-worker (latest) with the batching options of its performance page: `concurrency` C,
 * `maxPoolSize` max(10, C + 2), `localQueue.size` 500 (jobs are fetched and locked in batches of up
 * to 500 and handed out locally), `completeJobBatchDelay: 0` and `failJobBatchDelay: 0` (completions
 * of the same tick go to the database in one statement). Completed jobs are deleted (graphile keeps
 * no history).
 */
export class GraphileWorkerTarget implements BenchTarget {
  readonly claimStatementPattern = '%skip locked%';
  private utils: WorkerUtils | null = null;
  private runner: Runner | null = null;

  constructor(private readonly opts: TargetOptions) {}

  describe(): string {
    return `run({ connectionString, concurrency: ${this.opts.concurrency}, maxPoolSize: ${poolSize(this.opts.concurrency)}, preset: { worker: ${JSON.stringify(GRAPHILE_PRESET)} } }); addJob / addJobs through makeWorkerUtils`;
  }

  async open(): Promise<void> {
    this.utils = await makeWorkerUtils({ connectionString: this.opts.url, maxPoolSize: poolSize(this.opts.concurrency), logger: quiet });
    await this.utils.migrate();
  }

  async enqueueOne(payload: Payload): Promise<void> {
    await this.utils!.addJob(QUEUE, payload);
  }

  async enqueueMany(items: Payload[]): Promise<void> {
    await this.utils!.addJobs(items.map((payload) => ({ identifier: QUEUE, payload })));
  }

  async startWorker(onTask: (payload: Payload) => void): Promise<void> {
    this.runner = await run({
      connectionString: this.opts.url,
      concurrency: this.opts.concurrency,
      maxPoolSize: poolSize(this.opts.concurrency),
      noHandleSignals: true,
      logger: quiet,
      crontab: '',
      taskList: {
        [QUEUE]: async (payload) => {
          onTask(payload as Payload);
        },
      },
      preset: { worker: GRAPHILE_PRESET },
    });
  }

  async unfinished(db: Client): Promise<number> {
    const r = await db.query(`SELECT count(*)::int AS n FROM graphile_worker._private_jobs`);
    return r.rows[0].n;
  }

  async stored(db: Client): Promise<number> {
    return this.unfinished(db);
  }

  /**
   * graphile-worker deletes a job when it completes, so a million finished jobs leave no rows, only
   * their traces: the id sequence advanced and the table and its indexes grown and emptied.
   * History = `n` jobs inserted into _private_jobs (as addJobs would: this task, default queue-less)
   * and deleted again, then VACUUM ANALYZE.
   */
  async insertHistory(db: Client, n: number): Promise<void> {
    if (n > 0) {
      await db.query(`INSERT INTO graphile_worker._private_tasks (identifier) VALUES ($1) ON CONFLICT DO NOTHING`, [QUEUE]);
      await db.query(
        `INSERT INTO graphile_worker._private_jobs (task_id, payload, run_at, created_at, updated_at)
         SELECT t.id, json_build_object('seq', g), now() - interval '5 days', now() - interval '5 days', now() - interval '5 days'
         FROM graphile_worker._private_tasks t CROSS JOIN generate_series(1, $2::int) g
         WHERE t.identifier = $1`,
        [QUEUE, n],
      );
      await db.query(`DELETE FROM graphile_worker._private_jobs`);
    }
    await db.query('VACUUM ANALYZE graphile_worker._private_jobs');
  }

  async close(): Promise<void> {
    await this.runner?.stop();
    await this.utils?.release();
  }
}
