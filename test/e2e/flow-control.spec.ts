/**
 * Flow control enforced by Postgres across instances (limits.sql.ts): three app instances, each
 * with its own Prisma pool and LISTEN connection, run the same queues; every handler run records
 * when it started and ended, and the test sweeps those intervals: a limit is never exceeded, and
 * is reached (the instances do share the work).
 */
import { Injectable } from '@nestjs/common';
import {
  InvalidEnqueueOptionsError,
  InvalidOptionsError,
  TaskHandler,
  WorkerOrchestrator,
  type LeaseTaskContext,
  type PgQueueModuleOptions,
  type Task,
  type TaskContext,
} from '@app/pg-queue';
import { Pool } from 'pg';
import type { Prisma } from '../../src/generated/prisma/client';
import { killFixtureProcesses, startFixtureProcess } from '../support/fixture-process';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createRunLog, maxOverlap, maxRunOverlap, recordedRun } from '../support/run-log';
import { queueStates } from '../support/task-ledger';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

interface Run {
  queue: string;
  partition: string | null;
  start: number;
  end: number;
  attempt: number;
}

/** Every run of every instance (one process, one clock). */
const runs: Run[] = [];
const now = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function recorded(task: Task<{ p?: string; ms?: number }>, work: () => Promise<unknown> = () => sleep(task.payload.ms ?? 20)) {
  const run: Run = { queue: task.queue, partition: task.payload.p ?? null, start: now(), end: Number.NaN, attempt: task.attempt };
  runs.push(run);
  await work();
  run.end = now();
}

@Injectable()
class LimitedHandlers {
  @TaskHandler('fc.global', { mode: 'lease' })
  async global(task: Task<{ ms?: number }>, _ctx: LeaseTaskContext) {
    await recorded(task);
  }

  @TaskHandler('fc.global.tx', { mode: 'transactional' })
  async globalTx(task: Task<{ ms?: number }>, ctx: TaskContext<Prisma.TransactionClient>) {
    await recorded(task, async () => {
      await ctx.tx.$executeRawUnsafe('SELECT pg_sleep(0.02)');
    });
  }

  @TaskHandler('fc.part', { mode: 'lease' })
  async part(task: Task<{ p: string; ms?: number }>, _ctx: LeaseTaskContext) {
    await recorded(task);
  }

  @TaskHandler('fc.rate', { mode: 'lease' })
  async rate(task: Task<{ p?: string }>, _ctx: LeaseTaskContext) {
    await recorded(task, async () => undefined);
  }

  @TaskHandler('fc.prate', { mode: 'lease' })
  async partitionRate(task: Task<{ p?: string }>, _ctx: LeaseTaskContext) {
    await recorded(task, async () => undefined);
  }
}

const QUEUES: PgQueueModuleOptions['queues'] = {
  'fc.global': { concurrency: 4, globalConcurrency: 3 },
  'fc.global.tx': { concurrency: 3, batchSize: 1, globalConcurrency: 2 },
  'fc.part': { concurrency: 4, partitionConcurrency: 1 },
  'fc.rate': { concurrency: 4, rateLimit: { max: 5, perMs: 500 } },
  'fc.prate': { concurrency: 4, rateLimit: { max: 3, perMs: 500, perPartition: true } },
};

describe('flow control across three instances', () => {
  let db: TestDatabase;
  const instances: QueueApp[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    for (const name of ['i1', 'i2', 'i3']) {
      instances.push(await bootQueueApp(db.prisma(6), [LimitedHandlers], { databaseUrl: db.url, workerId: name, queues: QUEUES, pollIntervalMs: 1000 }));
    }
  });
  afterAll(async () => {
    for (const qa of instances) await qa.close();
    await db.drop();
  });

  const enqueue = (queue: string, payloads: object[]) => instances[0].queue.enqueueMany(payloads.map((payload) => ({ queue, payload })));
  const finished = (queue: string, n: number) =>
    waitFor(`${n} tasks of ${queue} done`, async () => (await queueStates(db.sql, queue)).done === n, { timeoutMs: 60_000, everyMs: 50 });
  const of = (queue: string) => runs.filter((r) => r.queue === queue);

  it('globalConcurrency: at most 3 lease tasks run at once over 3 instances of concurrency 4, and 3 do', async () => {
    await enqueue('fc.global', Array.from({ length: 60 }, () => ({ ms: 25 })));
    await finished('fc.global', 60);
    expect({ runs: of('fc.global').length, maxOverlap: maxOverlap(of('fc.global')) }).toEqual({ runs: 60, maxOverlap: 3 });
  });

  it('globalConcurrency in transactional mode: at most 2 at once', async () => {
    await enqueue('fc.global.tx', Array.from({ length: 30 }, () => ({})));
    await finished('fc.global.tx', 30);
    expect({ runs: of('fc.global.tx').length, maxOverlap: maxOverlap(of('fc.global.tx')) }).toEqual({ runs: 30, maxOverlap: 2 });
  });

  it('partitionConcurrency 1: one task per partition at a time, partitions in parallel', async () => {
    const partitions = ['acme', 'globex', 'initech', 'umbrella'];
    await instances[1].queue.enqueueMany(
      partitions.flatMap((p) => Array.from({ length: 12 }, () => ({ queue: 'fc.part', payload: { p, ms: 15 }, options: { partition: p } }))),
    );
    await finished('fc.part', 48);
    const perPartition = Object.fromEntries(partitions.map((p) => [p, maxOverlap(of('fc.part').filter((r) => r.partition === p))]));
    expect(perPartition).toEqual({ acme: 1, globex: 1, initech: 1, umbrella: 1 });
    expect(maxOverlap(of('fc.part'))).toBeGreaterThanOrEqual(3);
  });

  it('rateLimit 5 per 500 ms: no window holds more than 5 starts, and no attempt is spent waiting', async () => {
    const t0 = now();
    await enqueue('fc.rate', Array.from({ length: 20 }, () => ({})));
    await finished('fc.rate', 20);
    const starts = of('fc.rate').map((r) => r.start).sort((a, b) => a - b);
    // Every window that begins at a start: the most starts within 500 ms of it.
    // The rate counts claims, by the database's clock; a handler starts a few ms after its claim, a
    // little more or less each time: the windows checked here are 25 ms short of 500 for that.
    const busiest = Math.max(...starts.map((s) => starts.filter((t) => t >= s && t < s + 475).length));
    expect({ runs: starts.length, busiest, attempts: [...new Set(of('fc.rate').map((r) => r.attempt))] }).toEqual({ runs: 20, busiest: 5, attempts: [1] });
    // 20 starts at 5 per 500 ms need at least three full windows after the first.
    expect(starts[19] - t0).toBeGreaterThanOrEqual(1500 - 50);
  });

  it('rateLimit per partition, 3 per 500 ms: no partition over it in any window, partitions side by side', async () => {
    const t0 = now();
    await instances[2].queue.enqueueMany(
      ['acme', 'globex', null].flatMap((p) => Array.from({ length: 9 }, () => ({ queue: 'fc.prate', payload: { p: p ?? undefined }, options: p ? { partition: p } : {} }))),
    );
    await finished('fc.prate', 27);
    const busiest = (list: Run[]) => {
      const starts = list.map((r) => r.start).sort((a, b) => a - b);
      return Math.max(...starts.map((s) => starts.filter((t) => t >= s && t < s + 475).length));
    };
    const per = Object.fromEntries(['acme', 'globex', null].map((p) => [String(p), busiest(of('fc.prate').filter((r) => r.partition === p))]));
    expect({ per, attempts: [...new Set(of('fc.prate').map((r) => r.attempt))] }).toEqual({ per: { acme: 3, globex: 3, null: 3 }, attempts: [1] });
    expect(busiest(of('fc.prate'))).toBeGreaterThan(3); // the partitions do not share one window
    // 9 starts at 3 per 500 ms need two full windows after the first.
    expect(Math.max(...of('fc.prate').map((r) => r.start)) - t0).toBeGreaterThanOrEqual(1000 - 50);
    const [{ n }] = await db.sql("SELECT count(*)::int AS n FROM pgqueue.rate_window WHERE queue = 'fc.prate'");
    expect(n).toBe(3);
  });

  it('bad limits are typed errors naming the option, a bad partition writes nothing', async () => {
    const prisma = db.prisma(2);
    for (const [queues, path] of [
      [{ 'x.q': { globalConcurrency: 0 } }, 'queues["x.q"].globalConcurrency'],
      [{ 'x.q': { partitionConcurrency: 1.5 } }, 'queues["x.q"].partitionConcurrency'],
      [{ 'x.q': { rateLimit: { max: 0, perMs: 1000 } } }, 'queues["x.q"].rateLimit.max'],
      [{ 'x.q': { rateLimit: { max: 5, perMs: -1 } } }, 'queues["x.q"].rateLimit.perMs'],
      [{ 'x.q': { rateLimit: 5 } }, 'queues["x.q"].rateLimit'],
      [{ 'x.q': { rateLimit: { max: 5, perMs: 100, perPartition: 'yes' } } }, 'queues["x.q"].rateLimit.perPartition'],
    ] as const) {
      const err = await bootQueueApp(prisma, [], { queues: queues as never, autoStart: false }).then(
        (qa) => qa.close().then(() => null),
        (e: unknown) => e,
      );
      expect({ path, error: err instanceof InvalidOptionsError ? err.option : err }).toEqual({ path, error: path });
    }
    const before = (await db.sql('SELECT count(*)::int AS n FROM pgqueue.task'))[0].n;
    for (const partition of ['', 'x'.repeat(513), 'a\u0000b', 42]) {
      await expect(instances[0].queue.enqueue('fc.part', { p: 'x' }, { partition: partition as string })).rejects.toBeInstanceOf(InvalidEnqueueOptionsError);
    }
    expect((await db.sql('SELECT count(*)::int AS n FROM pgqueue.task'))[0].n).toBe(before);
  });
});

@Injectable()
class CrashSurvivor {
  log: Pool | null = null;
  @TaskHandler('fc.crash', { mode: 'lease' })
  async crash(task: Task) {
    await recordedRun(this.log!, task, 'survivor', 150);
  }
}

describe('flow control when an instance is killed mid-run', () => {
  let db: TestDatabase;
  let survivor: QueueApp;
  let log: Pool;

  beforeAll(async () => {
    db = await createTestDatabase();
    await createRunLog(db.sql);
    log = new Pool({ connectionString: db.url, max: 4 });
  });
  afterAll(async () => {
    await killFixtureProcesses();
    await survivor?.close();
    await log.end();
    await db.drop();
  });

  it('a killed holder keeps its slots until its leases are rescued; nothing is lost and the limit is never passed', async () => {
    const options = { concurrency: 4, globalConcurrency: 2, leaseMs: 1000 };
    survivor = await bootQueueApp(db.prisma(6), [CrashSurvivor], { databaseUrl: db.url, workerId: 'survivor', rescueIntervalMs: 200, queues: { 'fc.crash': options }, autoStart: false });
    survivor.app.get(CrashSurvivor).log = log;
    const child = startFixtureProcess('limited-worker', [JSON.stringify({ url: db.url, worker: 'child', globalConcurrency: 2, leaseMs: 1000, workMs: 2_000 })]);
    await child.line('READY', 30_000);
    await survivor.queue.enqueueMany(Array.from({ length: 12 }, (_, i) => ({ queue: 'fc.crash', payload: { i } })));
    // The child takes both slots (its runs take 2 s); then it dies with them.
    await waitFor('the child to run two tasks', async () => (await db.sql("SELECT count(*)::int AS n FROM fc_run WHERE worker = 'child'"))[0].n === 2);
    await survivor.app.get(WorkerOrchestrator).start();
    // Running tasks whose latest run has not ended: the killed child's keep their slots until rescued.
    // (A task whose handler ended and whose ending the survivor is writing still says running for a
    // moment; its slot is free: the survivor's next claim counts it so, see LeaseRunner.ending.)
    let mostRunning = 0;
    const sampling = setInterval(() => {
      void db
        .sql(
          `SELECT count(*)::int AS n FROM pgqueue.task t WHERE t.queue = 'fc.crash' AND t.state = 'running'
             AND coalesce((SELECT r.ended_at IS NULL FROM fc_run r WHERE r.task_id = t.id ORDER BY r.id DESC LIMIT 1), true)`,
        )
        .then(([r]) => (mostRunning = Math.max(mostRunning, r.n)), () => undefined);
    }, 20);
    try {
      await child.kill();
      const killedAt = new Date();
      await waitFor('every task done', async () => (await queueStates(db.sql, 'fc.crash')).done === 12, { timeoutMs: 30_000 });
      const [runs] = await db.sql("SELECT count(*) FILTER (WHERE worker = 'child')::int AS child, count(*) FILTER (WHERE worker = 'survivor')::int AS survivor FROM fc_run");
      expect({
        states: await queueStates(db.sql, 'fc.crash'),
        overlap: await maxRunOverlap(db.sql, killedAt),
        mostRunning,
        // the two killed runs ran again in the survivor, with every other task
        runs,
      }).toEqual({ states: { pending: 0, running: 0, done: 12, dead: 0, cancelled: 0 }, overlap: 2, mostRunning: 2, runs: { child: 2, survivor: 12 } });
    } finally {
      clearInterval(sampling);
    }
  }, 60_000);
});
