/**
 * Weighted partitions and priority aging across instances (claim.sql.ts): three
 * app instances share a queue whose partitions weigh 3 and 1, and the starts are counted in the
 * order they happen; two instances run a queue fed a steady stream of urgent tasks, and a less
 * urgent task starves there without aging and starts within its bound with it.
 */
import { Injectable } from '@nestjs/common';
import { InvalidEnqueueOptionsError, InvalidOptionsError, TaskHandler, type LeaseTaskContext, type Task } from '@app/pg-queue';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { maxOverlap } from '../support/run-log';
import { queueStates } from '../support/task-ledger';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

interface Run {
  queue: string;
  p: string;
  /** When it was enqueued (stream tasks). */
  at: number;
  start: number;
  end: number;
}
const runs: Run[] = [];
const now = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The stream of urgent tasks: each stream task, once run, enqueues the next while this is on. */
const stream = { on: false, enqueue: null as ((queue: string) => Promise<unknown>) | null };

async function recorded(task: Task<{ p: string; ms?: number; stream?: boolean; at?: number }>) {
  const run: Run = { queue: task.queue, p: task.payload.p, at: task.payload.at ?? 0, start: now(), end: Number.NaN };
  runs.push(run);
  await sleep(task.payload.ms ?? 1);
  run.end = now();
  if (task.payload.stream && stream.on) await stream.enqueue!(task.queue);
}

@Injectable()
class FairHandlers {
  @TaskHandler('fair.weights', { mode: 'lease' })
  async weights(task: Task<{ p: string }>, _ctx: LeaseTaskContext) {
    await recorded(task);
  }

  @TaskHandler('fair.starved', { mode: 'lease' })
  async starved(task: Task<{ p: string; ms: number; stream?: boolean }>, _ctx: LeaseTaskContext) {
    await recorded(task);
  }

  @TaskHandler('fair.aged', { mode: 'lease' })
  async aged(task: Task<{ p: string; ms: number; stream?: boolean }>, _ctx: LeaseTaskContext) {
    await recorded(task);
  }
}

const AGING_MS = 100;
const STREAM_BACKLOG = 60;
const QUEUES = {
  // Four slots over three instances: claims mostly take one task each, as slots free.
  'fair.weights': { concurrency: 4, globalConcurrency: 4, partitionConcurrency: 4 },
  'fair.starved': { concurrency: 2 },
  'fair.aged': { concurrency: 2, priorityAgingMs: AGING_MS },
};

describe('weighted partitions and priority aging across instances', () => {
  let db: TestDatabase;
  const instances: QueueApp[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    for (const name of ['i1', 'i2', 'i3']) {
      instances.push(await bootQueueApp(db.prisma(6), [FairHandlers], { databaseUrl: db.url, workerId: name, queues: QUEUES, pollIntervalMs: 500, partitionWeights: { configured: 3 } }));
    }
    stream.enqueue = (queue) => instances[0].queue.enqueue(queue, { p: 'stream', ms: 20, stream: true, at: now() }, { priority: 0 });
  });
  afterAll(async () => {
    stream.on = false;
    for (const qa of instances) await qa.close();
    await db.drop();
  });

  const done = (queue: string, n: number) =>
    waitFor(`${n} tasks of ${queue} done`, async () => (await queueStates(db.sql, queue)).done === n, { timeoutMs: 120_000, everyMs: 100 });

  it('weights 3:1 (enqueue option weight): 0.75 ± 0.05 of the first 2 000 starts, partitionConcurrency held', async () => {
    // More of each than the first 2 000 starts need at 3:1, so both partitions stay busy throughout.
    const items = (p: string, n: number, weight?: number) =>
      Array.from({ length: n }, () => ({ queue: 'fair.weights', payload: { p }, options: { partition: p, ...(weight ? { weight } : {}) } }));
    await instances[1].queue.enqueueMany([...items('heavy', 1700, 3), ...items('light', 900)]);
    await done('fair.weights', 2600);
    const started = runs.filter((r) => r.queue === 'fair.weights').sort((a, b) => a.start - b.start);
    const heavy = started.slice(0, 2000).filter((r) => r.p === 'heavy').length / 2000;
    expect({ heavyShare: Math.abs(heavy - 0.75) <= 0.05 ? 'within 0.75 ± 0.05' : heavy }).toEqual({ heavyShare: 'within 0.75 ± 0.05' });
    const perPartition = ['heavy', 'light'].map((p) => maxOverlap(started.filter((r) => r.p === p)));
    expect(Math.max(...perPartition)).toBeLessThanOrEqual(4);
    expect(maxOverlap(started)).toBeLessThanOrEqual(4);
  });

  it('weights 3:1 from the module option partitionWeights: 0.75 ± 0.05 of the first 800 starts', async () => {
    const items = (p: string, n: number) => Array.from({ length: n }, () => ({ queue: 'fair.weights', payload: { p }, options: { partition: p } }));
    const before = runs.length;
    await instances[0].queue.enqueueMany([...items('configured', 700), ...items('unweighted', 400)]);
    await done('fair.weights', 2600 + 1100);
    const started = runs.slice(before).sort((a, b) => a.start - b.start);
    const share = started.slice(0, 800).filter((r) => r.p === 'configured').length / 800;
    expect({ share: Math.abs(share - 0.75) <= 0.05 ? 'within 0.75 ± 0.05' : share }).toEqual({ share: 'within 0.75 ± 0.05' });
  });

  /**
   * Feeds `queue` a stream of priority-0 tasks (20 ms each; 60 waiting at any time, more than the
   * instances claim ahead of their slots), then enqueues one of priority 10.
   */
  async function streamThenLowPriority(queue: string): Promise<number> {
    stream.on = true;
    await instances[0].queue.enqueueMany(Array.from({ length: STREAM_BACKLOG }, () => ({ queue, payload: { p: 'stream', ms: 20, stream: true, at: now() }, options: { priority: 0 } })));
    await waitFor('the stream running', () => runs.filter((r) => r.queue === queue).length >= 20);
    const enqueuedAt = now();
    await instances[2].queue.enqueue(queue, { p: 'low', ms: 1 }, { priority: 10 });
    return enqueuedAt;
  }
  const lowStart = (queue: string) => runs.find((r) => r.queue === queue && r.p === 'low')?.start;

  it('without aging, a steady stream of priority-0 tasks starves a priority-10 task (as before priorityAgingMs)', async () => {
    const enqueuedAt = await streamThenLowPriority('fair.starved');
    const streamed = runs.filter((r) => r.queue === 'fair.starved').length;
    await waitFor('3 s of stream', () => now() - enqueuedAt >= 3000, { everyMs: 50 });
    const during = runs.filter((r) => r.queue === 'fair.starved').length - streamed;
    expect({ streamKeptRunning: during > 50, lowStarted: lowStart('fair.starved') !== undefined }).toEqual({ streamKeptRunning: true, lowStarted: false });
    stream.on = false;
    await waitFor('the priority-10 task once the stream stops', () => lowStart('fair.starved'), { timeoutMs: 10_000 });
  });

  it('with priorityAgingMs 100, the priority-10 task starts after 10 intervals, before every priority-0 task due later than that', async () => {
    const enqueuedAt = await streamThenLowPriority('fair.aged');
    const started = await waitFor('the priority-10 task', () => lowStart('fair.aged'), { timeoutMs: 20_000, everyMs: 20 });
    const streamOn = stream.on;
    stream.on = false;
    // Never before 10 intervals: a priority-0 task due earlier than that goes first (50 ms for the
    // two clocks). And no priority-0 task due more than 10 intervals after it starts before it:
    // 250 ms for its enqueue's round trip and a slot that another instance frees first.
    const overtaken = runs.filter((r) => r.queue === 'fair.aged' && r.p === 'stream' && r.at > enqueuedAt + 10 * AGING_MS + 250 && r.start < started).length;
    expect({ streamOn, early: started - enqueuedAt < 10 * AGING_MS - 50, overtaken }).toEqual({ streamOn: true, early: false, overtaken: 0 });
  });

  it('bad weights and aging are typed errors naming the option, and write nothing', async () => {
    const prisma = db.prisma(2);
    for (const [options, path] of [
      [{ partitionWeights: { a: 0 } }, 'partitionWeights["a"]'],
      [{ partitionWeights: { a: 1.5 } }, 'partitionWeights["a"]'],
      [{ partitionWeights: { '': 2 } }, 'partitionWeights[""]'],
      [{ partitionWeights: [3] }, 'partitionWeights'],
      [{ queues: { 'x.q': { priorityAgingMs: 0 } } }, 'queues["x.q"].priorityAgingMs'],
      [{ queues: { 'x.q': { priorityAgingMs: 100, partitionConcurrency: 2 } } }, 'queues["x.q"].priorityAgingMs'],
    ] as const) {
      const err = await bootQueueApp(prisma, [], { ...(options as object), autoStart: false }).then(
        (qa) => qa.close().then(() => null),
        (e: unknown) => e,
      );
      expect({ path, error: err instanceof InvalidOptionsError ? err.option : err }).toEqual({ path, error: path });
    }
    const count = async () =>
      (await db.sql("SELECT ((SELECT count(*) FROM pgqueue.task WHERE queue = 'fair.weights') + (SELECT count(*) FROM pgqueue.partition_weight))::int AS n"))[0].n;
    const before = await count();
    for (const options of [{ weight: 3 }, { partition: 'a', weight: 0 }, { partition: 'a', weight: 1001 }, { partition: 'a', weight: '3' }]) {
      await expect(instances[0].queue.enqueue('fair.weights', { p: 'a' }, options as never)).rejects.toBeInstanceOf(InvalidEnqueueOptionsError);
    }
    expect(await count()).toBe(before);
  });
});
