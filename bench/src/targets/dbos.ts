import { DBOS } from '@dbos-inc/dbos-sdk';
import { PrismaDataSource } from '@dbos-inc/prisma-datasource';
import { PrismaPg } from '@prisma/adapter-pg';
import type { Client } from 'pg';
import { PrismaClient } from '../../../src/generated/prisma/client';
import { poolSize } from '../common';
import { LEDGER_SQL, hooks, type WorkflowEngine, type WorkflowEngineOptions, type WorkflowGroup, type WorkflowInput } from '../workflows';

const QUEUE = 'bench_wf';
const DRAIN_WORKFLOW = 'benchOrder';
const SLEEP_WORKFLOW = 'benchSleeper';
const NAMES: Record<WorkflowGroup, string> = { drain: DRAIN_WORKFLOW, wakeup: SLEEP_WORKFLOW };

/** Set in open(); the datasource reads it lazily (it is constructed, and so registered, before launch). */
let prisma: PrismaClient | null = null;
const appDb = new PrismaDataSource<PrismaClient>('app-db', () => prisma!);

/** 3 steps: an outside call (DBOS.runStep), a datasource transaction writing a ledger row, an outside call. */
async function order(input: WorkflowInput): Promise<number> {
  const a = await DBOS.runStep(async () => ({ ok: input.seq }), { name: 'reserve' });
  await appDb.runTransaction(() => appDb.client.$executeRawUnsafe(LEDGER_SQL, input.seq, 'record'), { name: 'record' });
  const b = await DBOS.runStep(async () => a.ok + 1, { name: 'notify' });
  hooks.done(input.seq);
  return b;
}

/** Durable sleep until input.at: DBOS records the wake time on the first run (DBOS.sleep). */
async function sleeper(input: WorkflowInput): Promise<void> {
  hooks.asleep(input.seq);
  await DBOS.sleep(Math.max(0, input.at! - Date.now()));
  hooks.resumed(input.seq);
  await DBOS.runStep(async () => input.seq, { name: 'after' });
  hooks.done(input.seq);
}

const orderWorkflow = DBOS.registerWorkflow(order, { name: DRAIN_WORKFLOW });
const sleeperWorkflow = DBOS.registerWorkflow(sleeper, { name: SLEEP_WORKFLOW });

/**
 * DBOS Transact as its documentation configures it: DBOS.setConfig({ name, applicationVersion,
 * systemDatabaseUrl }) then DBOS.launch(); workflows from DBOS.registerWorkflow with DBOS.runStep
 * steps and a PrismaDataSource transaction (the same generated Prisma client and adapter as
 * pg-queue's); the drain's workflows go through a queue registered after launch
 * (DBOS.registerQueue, workerConcurrency C) and started with DBOS.startWorkflow(fn, { queueName });
 * sleepers are started directly (DBOS.startWorkflow without a queue: a queue's concurrency would
 * hold a slot per sleeping workflow). The system database is the run's database.
 */
export class DbosWorkflows implements WorkflowEngine {
  constructor(private readonly opts: WorkflowEngineOptions) {}

  describe(): string {
    const poll = this.opts.pollMs === undefined ? '' : `, minPollingIntervalMs: ${this.opts.pollMs}`;
    return `DBOS.setConfig({ name, applicationVersion: '0.1.0', systemDatabaseUrl, systemDatabasePoolSize: ${poolSize(this.opts.concurrency)}, logLevel: 'warn' }); DBOS.launch(); DBOS.registerQueue('${QUEUE}', { workerConcurrency: ${this.opts.concurrency}${poll} }); DBOS.registerWorkflow + DBOS.runStep + PrismaDataSource.runTransaction (PrismaPg pool max ${poolSize(this.opts.concurrency)}); DBOS.sleep; DBOS.startWorkflow(wf, { queueName }) (sleepers: no queue)`;
  }

  async open(): Promise<void> {
    prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: this.opts.url, max: poolSize(this.opts.concurrency) }) });
    DBOS.setConfig({
      name: 'pg-queue-bench',
      applicationVersion: '0.1.0',
      systemDatabaseUrl: this.opts.url,
      systemDatabasePoolSize: poolSize(this.opts.concurrency),
      logLevel: 'warn',
    });
    await DBOS.launch();
    await DBOS.registerQueue(QUEUE, { workerConcurrency: this.opts.concurrency, ...(this.opts.pollMs === undefined ? {} : { minPollingIntervalMs: this.opts.pollMs }) });
  }

  async startDrain(input: WorkflowInput): Promise<void> {
    await DBOS.startWorkflow(orderWorkflow, { queueName: QUEUE })(input);
  }

  async startSleeper(input: WorkflowInput): Promise<void> {
    await DBOS.startWorkflow(sleeperWorkflow)(input);
  }

  async finished(db: Client, group: WorkflowGroup): Promise<number> {
    const r = await db.query(`SELECT count(*)::int AS n FROM dbos.workflow_status WHERE name = $1 AND status = 'SUCCESS'`, [NAMES[group]]);
    return r.rows[0].n;
  }

  async parked(): Promise<null> {
    return null; // a sleeping DBOS workflow is an awaited timer in this process
  }

  async close(): Promise<void> {
    await DBOS.shutdown();
    await prisma?.$disconnect();
    prisma = null;
  }
}
