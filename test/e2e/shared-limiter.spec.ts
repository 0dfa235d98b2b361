/**
 * Named limiters shared across queues (issue 28, item 2): `limiters: { name: { concurrency,
 * rateLimit } }` and the handler option `limiter`. Two queues that call one provider share one
 * budget and one back-off, across three instances.
 */
import { Injectable } from '@nestjs/common';
import { InvalidOptionsError, RateLimitedError, TaskHandler, type LeaseTaskContext, type PgQueueModuleOptions, type Task, type TaskContext } from '@app/pg-queue';
import { PgQueueMetricsModule, QueueMetrics } from '@app/pg-queue/metrics';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { maxOverlap } from '../support/run-log';
import { queueStates } from '../support/task-ledger';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

const now = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Run {
  queue: string;
  start: number;
  end: number;
}
const runs: Run[] = [];
let mailDown = false;

async function recorded(task: Task, ms: number) {
  const run: Run = { queue: task.queue, start: now(), end: Number.NaN };
  runs.push(run);
  await sleep(ms);
  run.end = now();
}

@Injectable()
class SharedHandlers {
  @TaskHandler('sl.charge', { mode: 'lease', concurrency: 3, limiter: 'stripe' })
  async charge(task: Task, _ctx: LeaseTaskContext) {
    await recorded(task, 30);
  }

  @TaskHandler('sl.refund', { concurrency: 3, limiter: 'stripe' })
  async refund(task: Task, _ctx: TaskContext) {
    await recorded(task, 30);
  }

  @TaskHandler('sl.a', { mode: 'lease', concurrency: 4, limiter: 'geo' })
  async a(task: Task, _ctx: LeaseTaskContext) {
    await recorded(task, 0);
  }

  @TaskHandler('sl.b', { mode: 'lease', concurrency: 4, limiter: 'geo' })
  async b(task: Task, _ctx: LeaseTaskContext) {
    await recorded(task, 0);
  }

  @TaskHandler('sl.digest', { mode: 'lease', limiter: 'mail' })
  async digest(task: Task, _ctx: LeaseTaskContext) {
    if (mailDown) {
      mailDown = false;
      throw new RateLimitedError({ retryAfterMs: 1500 });
    }
    await recorded(task, 0);
  }

  @TaskHandler('sl.welcome', { mode: 'lease', limiter: 'mail' })
  async welcome(task: Task, _ctx: LeaseTaskContext) {
    await recorded(task, 0);
  }
}

const LIMITERS: PgQueueModuleOptions['limiters'] = {
  stripe: { concurrency: 2 },
  geo: { rateLimit: { max: 5, perMs: 1000 } },
  mail: { concurrency: 5 },
};

describe('named limiters shared by several queues, across three instances', () => {
  let db: TestDatabase;
  const instances: QueueApp[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    for (const name of ['i1', 'i2', 'i3']) {
      instances.push(await bootQueueApp(db.prisma(6), [SharedHandlers], { databaseUrl: db.url, workerId: name, limiters: LIMITERS, pollIntervalMs: 1000 }, [PgQueueMetricsModule]));
    }
  });
  afterAll(async () => {
    for (const qa of instances) await qa.close();
    await db.drop();
  });

  const finished = (queue: string, n: number) =>
    waitFor(`${n} tasks of ${queue} done`, async () => (await queueStates(db.sql, queue)).done === n, { timeoutMs: 60_000, everyMs: 50 });
  const of = (...queues: string[]) => runs.filter((r) => queues.includes(r.queue));

  it('concurrency: two queues (lease and transactional) never run more than 2 together, and do run 2', async () => {
    await instances[0].queue.enqueueMany(['sl.charge', 'sl.refund'].flatMap((queue) => Array.from({ length: 30 }, () => ({ queue, payload: {} }))));
    const budget = await waitFor('stripe in use', async () => (await instances[1].queue.limiterBudgets()).find((b) => b.name === 'stripe' && b.running > 0));
    expect(budget).toEqual(expect.objectContaining({ concurrency: 2, rateLimit: null, backedOffUntil: null }));
    expect(budget.running).toBeLessThanOrEqual(2);
    expect(await instances[0].app.get(QueueMetrics).metrics()).toMatch(/pgqueue_limiter_running\{limiter="stripe"\} [0-2]\n/);
    await finished('sl.charge', 30);
    await finished('sl.refund', 30);
    const both = of('sl.charge', 'sl.refund');
    expect({ runs: both.length, maxOverlap: maxOverlap(both) }).toEqual({ runs: 60, maxOverlap: 2 });
  });

  it('rate: at most 5 starts a second over both queues together', async () => {
    await instances[2].queue.enqueueMany(['sl.a', 'sl.b'].flatMap((queue) => Array.from({ length: 10 }, () => ({ queue, payload: {} }))));
    await finished('sl.a', 10);
    await finished('sl.b', 10);
    const starts = of('sl.a', 'sl.b').map((r) => r.start).sort((x, y) => x - y);
    expect(starts).toHaveLength(20);
    // 20 starts at 5 per second take at least 3 windows after the first (each queue alone would
    // pass in one); within any 800 ms (a margin for claim-to-start delays), at most 5.
    expect(starts[19] - starts[0]).toBeGreaterThanOrEqual(3000 - 100);
    const most = Math.max(...starts.map((t) => starts.filter((u) => u >= t && u < t + 800).length));
    expect(most).toBeLessThanOrEqual(5);
    const geo = (await instances[0].queue.limiterBudgets()).find((b) => b.name === 'geo')!;
    expect(geo).toEqual(expect.objectContaining({ rateLimit: { max: 5, perMs: 1000 }, concurrency: null }));
  });

  it("one back-off: a RateLimitedError of one queue (default scope: its limiter) holds the limiter's other queue too", async () => {
    mailDown = true;
    await instances[0].queue.enqueueMany([{ queue: 'sl.digest', payload: {} }]);
    const until = await waitFor('mail backed off', async () => (await instances[1].queue.limiterBudgets()).find((b) => b.name === 'mail')?.backedOffUntil);
    expect((await instances[2].queue.backOffs()).find((b) => b.scope === 'limiter' && b.name === 'mail')).toEqual(expect.objectContaining({ until }));
    await instances[1].queue.enqueueMany(Array.from({ length: 6 }, () => ({ queue: 'sl.welcome', payload: {} })));
    await finished('sl.welcome', 6);
    await finished('sl.digest', 1);
    // Nothing of either queue started before the back-off ended (the one clock of this machine; 50 ms for rounding).
    expect(Math.min(...of('sl.welcome', 'sl.digest').map((r) => r.start))).toBeGreaterThanOrEqual(until.getTime() - 50);
  });

  it('a handler that names an unknown limiter fails the module start with a clear error', async () => {
    @Injectable()
    class Typo {
      @TaskHandler('sl.typo', { limiter: 'strpe' })
      async run() {}
    }
    await expect(bootQueueApp(db.prisma(2), [Typo], { limiters: LIMITERS })).rejects.toThrow(InvalidOptionsError);
    await expect(bootQueueApp(db.prisma(2), [Typo], { limiters: LIMITERS })).rejects.toThrow(/limiter.*"strpe".*known: stripe, geo, mail/);
    await expect(bootQueueApp(db.prisma(2), [], { limiters: { queue: { concurrency: 1 } } })).rejects.toThrow(/"queue" is a back-off scope/);
    await expect(bootQueueApp(db.prisma(2), [], { limiters: { x: { concurency: 1 } as never } })).rejects.toThrow(/did you mean "concurrency"/);
  });
});
