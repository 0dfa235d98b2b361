import { randomBytes } from 'node:crypto';
import type { Client } from 'pg';
import { DEFAULT_HANDLER_OPTIONS } from '../../../libs/pg-queue/src/pg-queue.options';
import { enqueueStatements } from '../../../libs/pg-queue/src/sql/enqueue.sql';
import { notifyChannel } from '../../../libs/pg-queue/src/sql/identifiers';
import { printSchemaSql } from '../../../libs/pg-queue/src/sql/schema.sql';
import { taskRowsJson } from '../../../libs/pg-queue/src/sql/task-fields';
import { QUEUE, connect, type BenchTarget, type Payload, type TargetOptions } from '../common';
import { CLAIM_STATEMENT_PATTERN } from './pg-queue-statements';
import { SCHEMA, runBatch } from '../physical-limit';

/**
 * The wake-up "physical limit" (scenario 4): pg-queue's own statements on plain `pg` clients, with
 * no library, Nest or Prisma in the path. Enqueue is pg-queue's insert statement (its NOTIFY
 * included); a LISTEN client wakes a claimer, which runs scenario 7's runBatch: the handler is
 * called right after the claim (lease path), or after `BEGIN` and the lease lock (transactional
 * path), then the batch is completed on the same client.
 */
export class BarePgTarget implements BenchTarget {
  readonly claimStatementPattern = CLAIM_STATEMENT_PATTERN;
  private readonly mode: 'transactional' | 'lease';
  private readonly channel = notifyChannel(SCHEMA);
  private readonly insert = enqueueStatements(SCHEMA).insertMany;
  private readonly workerId = `bench-bare:${process.pid}:${randomBytes(3).toString('hex')}`;
  private enqueuer: Client | null = null;
  private listener: Client | null = null;
  private worker: Client | null = null;
  private wakes = 0;
  private looping: Promise<void> | null = null;
  /** The first error of a claim loop: the run fails with it at close() instead of timing out. */
  private failure: unknown = null;

  constructor(private readonly opts: TargetOptions) {
    this.mode = opts.mode ?? 'transactional';
  }

  describe(): string {
    return `three pg Clients (enqueue; LISTEN; claim → ${this.mode === 'transactional' ? 'BEGIN → lockLeases → handler → complete → COMMIT' : 'handler → complete'}), pg-queue's statements as named prepared statements, claims of up to ${DEFAULT_HANDLER_OPTIONS.batchSize}`;
  }

  async open(): Promise<void> {
    this.enqueuer = await connect(this.opts.url);
    await this.enqueuer.query(printSchemaSql(SCHEMA));
  }

  async enqueueOne(payload: Payload): Promise<void> {
    const row = {
      queue: QUEUE,
      payloadJson: JSON.stringify(payload),
      priority: 0,
      runAt: null,
      delayMs: 0,
      maxAttempts: null,
      parentId: null,
      dedupKey: null,
      groupKey: null,
      onConflict: 'ignore' as const,
      traceContext: null,
      partitionKey: null,
      tags: null,
      debounce: null,
      dependsOn: null,
    };
    await this.enqueuer!.query({ name: 'insert', text: this.insert, values: [taskRowsJson([row]), this.channel] });
  }

  enqueueMany(): Promise<void> {
    throw new Error('bare-pg measures only the wake-up path (scenario 4)');
  }

  async startWorker(onTask: (payload: Payload) => void): Promise<void> {
    this.worker = await connect(this.opts.url);
    this.listener = await connect(this.opts.url);
    this.listener.on('notification', () => this.wake(onTask));
    await this.listener.query(`LISTEN ${this.channel}`);
    this.wake(onTask);
  }

  /** One claim loop at a time; a wake during it makes it claim once more. */
  private wake(onTask: (payload: Payload) => void): void {
    this.wakes++;
    if (this.looping) return;
    this.looping = this.claimUntilEmpty(onTask)
      .catch((err: unknown) => {
        this.failure ??= err;
        console.error(`bare-pg claim loop failed: ${(err as Error).message}`);
      })
      .finally(() => (this.looping = null));
  }

  private async claimUntilEmpty(onTask: (payload: Payload) => void): Promise<void> {
    for (let seen = -1; seen !== this.wakes; ) {
      seen = this.wakes;
      while ((await runBatch(this.worker!, this.mode, this.workerId, onTask as (payload: unknown) => void)).claimed > 0);
    }
  }

  async unfinished(db: Client): Promise<number> {
    const r = await db.query(`SELECT count(*)::int AS n FROM ${SCHEMA}.task WHERE queue = $1`, [QUEUE]);
    return r.rows[0].n;
  }

  async stored(db: Client): Promise<number> {
    const r = await db.query(
      `SELECT (SELECT count(*) FROM ${SCHEMA}.task WHERE queue = $1) + (SELECT count(*) FROM ${SCHEMA}.task_archive WHERE queue = $1) AS n`,
      [QUEUE],
    );
    return Number(r.rows[0].n);
  }

  insertHistory(): Promise<void> {
    throw new Error('bare-pg measures only the wake-up path (scenario 4)');
  }

  async close(): Promise<void> {
    await this.looping;
    await Promise.all([this.listener, this.worker, this.enqueuer].map((c) => c?.end().catch(() => undefined)));
    if (this.failure) throw this.failure;
  }
}
