import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { PrismaPg } from '@prisma/adapter-pg';
import type { Client } from 'pg';
import { DEFAULT_HANDLER_OPTIONS, PgQueueModule, TaskHandler, TaskQueue, WorkerOrchestrator, queueStatementName, type Task } from '@app/pg-queue';
import { PgQueueMetricsModule } from '@app/pg-queue/metrics';
import { PrismaClient } from '../../../src/generated/prisma/client';
import { QUEUE, poolSize, type BenchTarget, type Payload, type TargetOptions } from '../common';
import { CLAIM_STATEMENT_PATTERN } from './pg-queue-statements';
import { runScale, type ScaleProbe } from '../scale';

/** Set by startWorker; the handler below calls it first thing. */
let onTask: ((payload: Payload) => void) | null = null;

@Injectable()
class BenchHandlers {
  // No options here: mode and concurrency come from the module's `queues` option, as a user would
  // configure them per deployment.
  @TaskHandler(QUEUE)
  async noop(task: Task<Payload>): Promise<void> {
    onTask?.(task.payload);
  }
}

/**
 * pg-queue through its real Nest module: PgQueueModule.forRoot({ prisma, databaseUrl, ... }) with a
 * PrismaClient from the example app's generated client on @prisma/adapter-pg, prepared statements
 * via queueStatementName as the README recommends. Everything else is the library's default
 * (batchSize, finished tasks archived, LISTEN on databaseUrl).
 */
export class PgQueueTarget implements BenchTarget {
  readonly claimStatementPattern = CLAIM_STATEMENT_PATTERN;
  private prisma: PrismaClient | null = null;
  private app: INestApplicationContext | null = null;
  private readonly mode: 'transactional' | 'lease';

  constructor(private readonly opts: TargetOptions) {
    this.mode = opts.mode ?? 'transactional';
  }

  describe(): string {
    const limit = this.opts.globalConcurrency === undefined ? '' : `, globalConcurrency: ${this.opts.globalConcurrency}`;
    return `PgQueueModule.forRoot({ prisma, databaseUrl, autoStart: false, queues: { ${QUEUE}: { mode: '${this.mode}', concurrency: ${this.opts.concurrency}${limit} } } }) — batchSize ${DEFAULT_HANDLER_OPTIONS.batchSize} (default: the most per claim, below it claims follow the pace), finished: 'archive' (default); PrismaPg pool max ${poolSize(this.opts.concurrency)}, statementNameGenerator: queueStatementName`;
  }

  async open(): Promise<void> {
    this.prisma = new PrismaClient({
      adapter: new PrismaPg({ connectionString: this.opts.url, max: poolSize(this.opts.concurrency) }, { statementNameGenerator: queueStatementName }),
    });
    const prisma = this.prisma;
    const { mode, concurrency } = this;
    const globalConcurrency = this.opts.globalConcurrency;

    @Module({
      imports: [
        PgQueueModule.forRoot({
          prisma,
          databaseUrl: this.opts.url,
          // The bench starts the workers itself (WorkerOrchestrator.start()) once the backlog is in
          // place, so the drain clock starts at the same point for every library.
          autoStart: false,
          queues: { [QUEUE]: { mode, concurrency, ...(globalConcurrency === undefined ? {} : { globalConcurrency }) } },
        }),
        // Only where scenario 8 scrapes them: metrics are opt-in, ~0.4 µs per finished task.
        ...(this.opts.metrics ? [PgQueueMetricsModule] : []),
      ],
      providers: [BenchHandlers],
    })
    class BenchModule {}

    this.app = await NestFactory.createApplicationContext(BenchModule, { logger: ['error', 'warn'] });
  }

  private get concurrency(): number {
    return this.opts.concurrency;
  }

  private get queue(): TaskQueue {
    return this.app!.get(TaskQueue);
  }

  async enqueueOne(payload: Payload): Promise<void> {
    await this.queue.enqueue(QUEUE, payload);
  }

  async enqueueMany(items: Payload[]): Promise<void> {
    await this.queue.enqueueMany(items.map((payload) => ({ queue: QUEUE, payload })));
  }

  async startWorker(fn: (payload: Payload) => void): Promise<void> {
    onTask = fn;
    await this.app!.get(WorkerOrchestrator).start();
  }

  /**
   * Opens every connection of the Prisma pool (parallel queries each take one), so that scenario
   * 10's timed part does not include connecting, which is part of a process's startup.
   */
  async warmPool(): Promise<void> {
    await Promise.all(Array.from({ length: poolSize(this.opts.concurrency) }, () => this.prisma!.$queryRawUnsafe('SELECT 1 AS one FROM pg_sleep(0.01)')));
  }

  async unfinished(db: Client): Promise<number> {
    const r = await db.query(`SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = $1`, [QUEUE]);
    return r.rows[0].n;
  }

  async stored(db: Client): Promise<number> {
    const r = await db.query(
      `SELECT (SELECT count(*) FROM pgqueue.task WHERE queue = $1) + (SELECT count(*) FROM pgqueue.task_archive WHERE queue = $1) AS n`,
      [QUEUE],
    );
    return Number(r.rows[0].n);
  }

  /**
   * Each history task goes through the hot table the way a real one does: inserted as pending
   * (drawing its id from the identity), then deleted and archived as `done` in one statement, as the
   * completion does. finished_at is spread over the last 5 days, inside the default 7-day archive
   * retention, so the pruner keeps them. Then VACUUM ANALYZE (autovacuum having caught up).
   */
  async insertHistory(db: Client, n: number): Promise<void> {
    if (n > 0) {
      await db.query(
        `INSERT INTO pgqueue.task (queue, payload, created_at, run_at)
         SELECT $1, jsonb_build_object('seq', g), now() - interval '5 days' + g * (interval '5 days' / $2), now() - interval '5 days' + g * (interval '5 days' / $2)
         FROM generate_series(1, $2::int) g`,
        [QUEUE, n],
      );
      await db.query(
        `WITH done AS (DELETE FROM pgqueue.task WHERE queue = $1 RETURNING *)
         INSERT INTO pgqueue.task_archive (id, queue, state, payload, priority, run_at, attempt, max_attempts, last_error,
                                           parent_id, dedup_key, group_key, created_at, started_at, finished_at)
         SELECT id, queue, 'done', payload, priority, run_at, 1, max_attempts, NULL, parent_id, dedup_key, group_key,
                created_at, created_at + interval '3 ms', created_at + interval '5 ms'
         FROM done`,
        [QUEUE],
      );
    }
    await db.query('VACUUM ANALYZE pgqueue.task');
    await db.query('VACUUM ANALYZE pgqueue.task_archive');
  }

  /**
   * The archived half of scenario 8's template: `n` done tasks finished over the last 5 days,
   * written straight into the archive (ids from the task sequence, as completions keep them), in
   * statements of at most 1 M rows. Then VACUUM ANALYZE.
   * The archive is laid out as it is a week into an install with the default retention: daily
   * partitions (named and built as the pruner builds them) from 6 days ago to 3 days ahead, where a
   * fresh install has the migration's legacy partition (empty here, so it is dropped) covering the
   * past. An id lookup then probes 10 partitions, as it would in production.
   */
  async insertArchived(db: Client, n: number): Promise<void> {
    await db.query(`DROP TABLE pgqueue.task_archive_legacy`);
    await db.query(`
DO $$ DECLARE lo timestamptz; BEGIN
  FOR d IN -6..3 LOOP
    lo := date_trunc('day', now(), 'UTC') + d * interval '1 day';
    EXECUTE format('CREATE TABLE pgqueue.%I PARTITION OF pgqueue.task_archive (PRIMARY KEY (id)) FOR VALUES FROM (%L) TO (%L)',
                   'task_archive_p' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD_HH24MISS'), lo, lo + interval '1 day');
  END LOOP;
END $$`);
    const chunk = 1_000_000;
    for (let from = 1; from <= n; from += chunk) {
      await db.query(
        `INSERT INTO pgqueue.task_archive (id, queue, state, payload, priority, run_at, attempt, created_at, started_at, finished_at)
         SELECT nextval(pg_get_serial_sequence('pgqueue.task', 'id')), $1, 'done', jsonb_build_object('seq', g), 0, t, 1, t, t + interval '3 ms', t + interval '5 ms'
         FROM generate_series($2::int, $3::int) g, LATERAL (SELECT now() - interval '5 days' + g * (interval '5 days' / $4)) AS x(t)`,
        [QUEUE, from, Math.min(n, from + chunk - 1), n],
      );
    }
    await db.query('VACUUM ANALYZE pgqueue.task_archive');
  }

  /**
   * The delayed half of scenario 8's template (insertArchived is the archived half): `n` pending
   * tasks due in 1 to 12 days, as enqueue with delayMs writes them. Then VACUUM ANALYZE.
   */
  async insertDelayed(db: Client, n: number): Promise<void> {
    if (n > 0) {
      await db.query(
        `INSERT INTO pgqueue.task (queue, payload, run_at)
         SELECT $1, jsonb_build_object('seq', g), now() + interval '1 day' + g * interval '1 second'
         FROM generate_series(1, $2::int) g`,
        [QUEUE, n],
      );
    }
    await db.query('VACUUM ANALYZE pgqueue.task');
  }

  /** Scenario 8 (bench/src/scale.ts) on this target's app and Prisma client. */
  measureScale(db: Client, probe: ScaleProbe | null, calls: number, deadline: number): Promise<Record<string, number | null>> {
    return runScale(this.app!, this.prisma!, db, probe, calls, deadline);
  }

  async close(): Promise<void> {
    onTask = null;
    // app.close() drains the workers (the module also holds prisma.$disconnect until then).
    await this.app?.close();
    await this.prisma?.$disconnect();
  }
}
