import 'reflect-metadata';
import { performance } from 'node:perf_hooks';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { PrismaPg } from '@prisma/adapter-pg';
import type { Client } from 'pg';
import { PgQueueModule, RateLimitedError, TaskHandler, TaskQueue, WorkerOrchestrator, queueStatementName, type HandlerOptions, type Task } from '@app/pg-queue';
import { PrismaClient } from '../../src/generated/prisma/client';
import type { StatementStats } from './statement-stats';
import { QUEUE, chunks, connect, poolSize, waitFor } from './common';
import { prepareBareLimited, runBareLimited } from './bare-limited';

/**
 * Scenario 9: flow control (lease mode, concurrency 50, one process). Drains of the same backlog
 * with no rule, a global limit of 20, 100 partitions one at a time each, and a rate limit of 5 000
 * per second; then fairness: tenant A enqueues 10 000 tasks, then tenant B 10, and B's tasks wait
 * from their enqueue to their handler's start, with the queue plain (first in, first out) or
 * partitioned (partitionConcurrency, partitions taking turns). And what weights cost the claim: drains
 * over 1 000 partitions one at a time each, without weights and with weights 1 to 4
 * (partitionWeights), with the partitioned claim's server time per call; a drain under priority
 * aging (priorities 0 to 4, priorityAgingMs 1 000), with the aging claim's. And back-off (issue 28):
 * the downstream answers 429 for the first OUTAGE_MS of the drain; handlers throw RateLimitedError
 * (scope 'queue'); measured from the outage's end to the first served call and to full throughput.
 * And the bound of the slot-holding rules: the global limit and the 100 partitions drained by bare
 * `pg` loops of the same statements, no library (bare-limited.ts).
 */
export const FLOW_GROUPS = [
  'plain', 'global20', 'partitions100', 'rate5000', 'fifo', 'fair', 'partitions1000', 'weighted1000', 'aging', 'backoff', 'bare-global20', 'bare-partitions100',
] as const;
export type FlowGroup = (typeof FLOW_GROUPS)[number];

const CONCURRENCY = 50;
const RULES: Record<FlowGroup, Partial<HandlerOptions>> = {
  plain: {},
  global20: { globalConcurrency: 20 },
  partitions100: { partitionConcurrency: 1 },
  rate5000: { rateLimit: { max: 5000, perMs: 1000 } },
  fifo: {},
  fair: { partitionConcurrency: CONCURRENCY }, // no cap below the process's: only the turns differ from fifo
  partitions1000: { partitionConcurrency: 1 },
  weighted1000: { partitionConcurrency: 1 },
  aging: { priorityAgingMs: 1000 },
  backoff: {},
  'bare-global20': { globalConcurrency: 20 },
  'bare-partitions100': { partitionConcurrency: 1 },
};
/** Partitions of the drains over many partitions; every other one of the weighted drain weighs 2 to 4. */
const PARTITIONS: Partial<Record<FlowGroup, number>> = { partitions100: 100, partitions1000: 1000, weighted1000: 1000, 'bare-partitions100': 100 };
const WEIGHTS: Partial<Record<FlowGroup, Record<string, number>>> = {
  weighted1000: Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`p${i}`, 1 + (i % 4)])),
};
/** What the partitioned claim's and the aging claim's texts hold (claim.sql.ts), for pg_stat_statements. */
const PARTITIONED_CLAIM = '%walk AS (%';
const AGING_CLAIM = '%aged AS MATERIALIZED%';

/** What a handler call does: a number is a 429's Retry-After, in ms. */
let onTask: ((payload: { seq: number; tenant?: string }) => void | number) | null = null;

@Injectable()
class FlowHandlers {
  @TaskHandler(QUEUE)
  async noop(task: Task<{ seq: number; tenant?: string }>): Promise<void> {
    const retryAfterMs = onTask?.(task.payload);
    if (typeof retryAfterMs === 'number') throw new RateLimitedError({ retryAfterMs, scope: 'queue' });
  }
}

export async function runFlow(
  url: string, group: FlowGroup, n: number, timeoutMs: number, db: Client, stats: StatementStats | null,
): Promise<{ metrics: Record<string, number | null>; settings: string }> {
  // The claims below run inside claim_limited (limited-claim.function.ts): count nested statements.
  await stats?.trackNested();
  if (group.startsWith('bare-')) return bareDrain(url, group, n, Date.now() + timeoutMs, db, stats);
  const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: url, max: poolSize(CONCURRENCY) }, { statementNameGenerator: queueStatementName }) });
  const options = { mode: 'lease' as const, concurrency: CONCURRENCY, ...RULES[group] };
  @Module({
    imports: [PgQueueModule.forRoot({ prisma, databaseUrl: url, autoStart: false, queues: { [QUEUE]: options }, partitionWeights: WEIGHTS[group] })],
    providers: [FlowHandlers],
  })
  class FlowModule {}
  const app = await NestFactory.createApplicationContext(FlowModule, { logger: ['error', 'warn'] });
  const settings = `queues: { ${QUEUE}: ${JSON.stringify(options)} }${WEIGHTS[group] ? ', partitionWeights: 1 to 4' : ''}`;
  try {
    const queue = app.get(TaskQueue);
    const deadline = Date.now() + timeoutMs;
    if (group === 'fifo' || group === 'fair') return { metrics: await fairness(app.get(WorkerOrchestrator), queue, group, n, deadline, db), settings };
    if (group === 'backoff') return { metrics: await outage(app.get(WorkerOrchestrator), queue, n, deadline, db), settings };

    const partitions = PARTITIONS[group];
    for (const part of chunks(Array.from({ length: n }, (_, seq) => seq), 1000)) {
      const options = (seq: number) => (partitions ? { partition: `p${seq % partitions}` } : group === 'aging' ? { priority: seq % 5 } : undefined);
      await queue.enqueueMany(part.map((seq) => ({ queue: QUEUE, payload: { seq }, options: options(seq) })));
    }
    await db.query('ANALYZE');
    await stats?.reset();
    let handled = 0;
    onTask = () => void handled++;
    const t0 = performance.now();
    await app.get(WorkerOrchestrator).start();
    await waitFor(`${n} handler calls (got ${handled})`, () => handled >= n, deadline - Date.now(), 2);
    await waitFor('every task finished', async () => (await unfinished(db)) === 0, Math.max(1000, deadline - Date.now()), 5);
    const tasksPerSec = (n / (performance.now() - t0)) * 1000;
    const claimText = partitions ? PARTITIONED_CLAIM : group === 'aging' ? AGING_CLAIM : null;
    const st = claimText ? await stats?.read(claimText) : undefined;
    const claimMsPerCall = st && st.claimCalls > 0 ? st.claimMs / st.claimCalls : null;
    return { metrics: { tasksPerSec, bWaitP50: null, bWaitMax: null, claimMsPerCall }, settings };
  } finally {
    onTask = null;
    await app.close();
    await prisma.$disconnect();
  }
}

/**
 * A slot-holding rule's drain on bare clients: the same claim and completion, no library
 * (bare-limited.ts). The backlog goes in as the other rows' does (then ANALYZE); the clock runs
 * from the first claim to the last completion.
 */
async function bareDrain(url: string, group: FlowGroup, n: number, deadline: number, db: Client, stats: StatementStats | null) {
  const rules = RULES[group];
  const limits = { globalConcurrency: rules.globalConcurrency ?? null, partitionConcurrency: rules.partitionConcurrency ?? null, rateLimit: null };
  await prepareBareLimited(db, n, PARTITIONS[group] ?? 0);
  const [a, b] = [await connect(url), await connect(url)];
  try {
    await stats?.reset();
    const t0 = performance.now();
    const { completed, claims } = await runBareLimited(a, b, limits, CONCURRENCY, deadline);
    const ms = performance.now() - t0;
    if (completed !== n) throw new Error(`bare loop completed ${completed} of ${n}`);
    const st = PARTITIONS[group] ? await stats?.read(PARTITIONED_CLAIM) : undefined;
    const claimMsPerCall = st && st.claimCalls > 0 ? st.claimMs / st.claimCalls : null;
    const metrics = { tasksPerSec: (n / ms) * 1000, bWaitP50: null, bWaitMax: null, claimMsPerCall, bareCycleMs: ms / claims };
    return { metrics, settings: `bare pg clients, claim_limited ${JSON.stringify(limits)}, ${CONCURRENCY} slots` };
  } finally {
    await Promise.all([a.end(), b.end()]);
  }
}

/** Tenant A's `n` tasks go in first; the worker starts; 200 ms later tenant B enqueues 10. */
async function fairness(orchestrator: WorkerOrchestrator, queue: TaskQueue, group: FlowGroup, n: number, deadline: number, db: Client) {
  const fair = group === 'fair';
  for (const part of chunks(Array.from({ length: n }, (_, seq) => seq), 1000)) {
    await queue.enqueueMany(part.map((seq) => ({ queue: QUEUE, payload: { seq, tenant: 'A' }, options: fair ? { partition: 'A' } : undefined })));
  }
  await db.query('ANALYZE');
  const started = new Map<number, number>();
  onTask = (p) => {
    if (p.tenant === 'B') started.set(p.seq, performance.now());
  };
  await orchestrator.start();
  await new Promise((resolve) => setTimeout(resolve, 200));
  const sent = performance.now();
  await queue.enqueueMany(Array.from({ length: 10 }, (_, seq) => ({ queue: QUEUE, payload: { seq, tenant: 'B' }, options: fair ? { partition: 'B' } : undefined })));
  await waitFor(`tenant B's 10 tasks (got ${started.size})`, () => started.size >= 10, deadline - Date.now(), 2);
  await waitFor('every task finished', async () => (await unfinished(db)) === 0, Math.max(1000, deadline - Date.now()), 5);
  const waits = [...started.values()].map((t) => t - sent).sort((a, b) => a - b);
  return { tasksPerSec: null, bWaitP50: waits[Math.ceil(waits.length / 2) - 1], bWaitMax: waits[waits.length - 1] };
}

/** The downstream answers 429 for this long from the worker's start (scenario 9, back-off). */
const OUTAGE_MS = 1000;
/** Throughput is counted over windows this long; "full" is 90 % of the rate after the outage. */
const RATE_WINDOW_MS = 100;

/**
 * `n` tasks wait; the worker starts while the downstream is down: the first calls meet a 429 and
 * back the queue off until the outage ends. Measured from that end: the first served call, and
 * the first moment the last RATE_WINDOW_MS served 90 % of the drain's mean rate after the outage.
 */
async function outage(orchestrator: WorkerOrchestrator, queue: TaskQueue, n: number, deadline: number, db: Client) {
  for (const part of chunks(Array.from({ length: n }, (_, seq) => seq), 1000)) {
    await queue.enqueueMany(part.map((seq) => ({ queue: QUEUE, payload: { seq } })));
  }
  await db.query('ANALYZE');
  const served: number[] = [];
  let rejected = 0;
  const downUntil = performance.now() + OUTAGE_MS;
  onTask = () => {
    const now = performance.now();
    if (now < downUntil) return ++rejected && Math.ceil(downUntil - now);
    served.push(now);
  };
  await orchestrator.start();
  await waitFor(`${n} served calls (got ${served.length})`, () => served.length >= n, deadline - Date.now(), 2);
  await waitFor('every task finished', async () => (await unfinished(db)) === 0, Math.max(1000, deadline - Date.now()), 5);
  const rate = served.length / Math.max(1, served[served.length - 1] - served[0]); // calls per ms
  const full = served.findIndex((t, i) => i + 1 - lowerBound(served, t - RATE_WINDOW_MS) >= 0.9 * rate * RATE_WINDOW_MS);
  return {
    tasksPerSec: rate * 1000,
    firstServedMs: served[0] - downUntil,
    fullRateMs: full < 0 ? null : served[full] - downUntil,
    rejectedCalls: rejected,
  };
}

/** The index of the first element of sorted `xs` above `t`. */
function lowerBound(xs: number[], t: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] <= t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

async function unfinished(db: Client): Promise<number> {
  return (await db.query(`SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = $1`, [QUEUE])).rows[0].n;
}
