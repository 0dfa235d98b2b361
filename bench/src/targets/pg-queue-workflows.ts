import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { PrismaPg } from '@prisma/adapter-pg';
import type { Client } from 'pg';
import { PgQueueModule, TaskQueue, Workflow, queueStatementName, type WorkflowContext } from '@app/pg-queue';
import { PrismaClient } from '../../../src/generated/prisma/client';
import { poolSize } from '../common';
import { LEDGER_SQL, hooks, type WorkflowEngine, type WorkflowEngineOptions, type WorkflowGroup, type WorkflowInput } from '../workflows';

const DRAIN = 'bench_wf';
const SLEEP = 'bench_wf_sleep';
const QUEUES: Record<WorkflowGroup, string> = { drain: DRAIN, wakeup: SLEEP };

@Injectable()
class BenchWorkflows {
  /** 3 steps: an outside call, a database transaction writing a ledger row, an outside call. */
  @Workflow(DRAIN)
  async order(input: WorkflowInput, wf: WorkflowContext<PrismaClient>) {
    const a = await wf.step('reserve', () => ({ ok: input.seq }));
    await wf.transaction('record', (tx) => tx.$executeRawUnsafe(LEDGER_SQL, input.seq, 'record'));
    const b = await wf.step('notify', () => a.ok + 1);
    hooks.done(input.seq);
    return b;
  }

  @Workflow(SLEEP)
  async sleeper(input: WorkflowInput, wf: WorkflowContext) {
    hooks.asleep(input.seq);
    await wf.sleepUntil(new Date(input.at!));
    hooks.resumed(input.seq);
    await wf.step('after', () => input.seq);
    hooks.done(input.seq);
  }
}

/**
 * pg-queue's `@Workflow` through its real Nest module, as the pg-queue target boots it (PrismaPg
 * pool max(10, C + 2), prepared statements via queueStatementName), workers started at boot;
 * workflows are lease-mode tasks, so `concurrency` bounds the running attempts (parked ones hold no slot).
 */
export class PgQueueWorkflows implements WorkflowEngine {
  private prisma: PrismaClient | null = null;
  private app: INestApplicationContext | null = null;

  constructor(private readonly opts: WorkflowEngineOptions) {}

  /** The sleeper queue's slots: as many as sleepers, as DBOS's unqueued sleepers (see WorkflowEngineOptions.sleepers). */
  private get sleeperSlots(): number {
    return this.opts.sleepers ?? this.opts.concurrency;
  }

  describe(): string {
    return `PgQueueModule.forRoot({ prisma, databaseUrl, queues: { ${DRAIN}: { concurrency: ${this.opts.concurrency} }, ${SLEEP}: { concurrency: ${this.sleeperSlots} } } }); @Workflow methods (lease mode), wf.step / wf.transaction (Prisma interactive transaction) / wf.sleepUntil; started with queue.enqueue; PrismaPg pool max ${poolSize(this.opts.concurrency)}, statementNameGenerator: queueStatementName`;
  }

  async open(): Promise<void> {
    this.prisma = new PrismaClient({
      adapter: new PrismaPg({ connectionString: this.opts.url, max: poolSize(this.opts.concurrency) }, { statementNameGenerator: queueStatementName }),
    });
    const prisma = this.prisma;
    const concurrency = this.opts.concurrency;

    @Module({
      imports: [PgQueueModule.forRoot({ prisma, databaseUrl: this.opts.url, queues: { [DRAIN]: { concurrency }, [SLEEP]: { concurrency: this.sleeperSlots } } })],
      providers: [BenchWorkflows],
    })
    class BenchModule {}

    this.app = await NestFactory.createApplicationContext(BenchModule, { logger: ['error', 'warn'] });
  }

  private get queue(): TaskQueue {
    return this.app!.get(TaskQueue);
  }

  async startDrain(input: WorkflowInput): Promise<void> {
    await this.queue.enqueue(DRAIN, input);
  }

  async startSleeper(input: WorkflowInput): Promise<void> {
    await this.queue.enqueue(SLEEP, input);
  }

  async finished(db: Client, group: WorkflowGroup): Promise<number> {
    const r = await db.query(`SELECT count(*)::int AS n FROM pgqueue.task_archive WHERE queue = $1 AND state = 'done'`, [QUEUES[group]]);
    return r.rows[0].n;
  }

  async parked(db: Client): Promise<number> {
    const r = await db.query(`SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = $1 AND state = 'waiting'`, [SLEEP]);
    return r.rows[0].n;
  }

  async close(): Promise<void> {
    await this.app?.close();
    await this.prisma?.$disconnect();
  }
}
