/**
 * Debounce (debounce.sql.ts): requests of one key fold into one run, decided by Postgres, so
 * requests from several app instances at once agree. Timing checks use wide margins: what is
 * asserted exactly is how many runs there are and with which payload.
 */
import { Injectable } from '@nestjs/common';
import { InvalidEnqueueOptionsError, TaskHandler, WorkerOrchestrator, type LeaseTaskContext, type Task } from '@app/pg-queue';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

interface Run {
  key: string;
  n: number;
  start: number;
}

const now = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Injectable()
class Debounced {
  runs: Run[] = [];
  holdMs = 0;

  @TaskHandler('db.q', { mode: 'lease', concurrency: 4 })
  async run(task: Task<{ key: string; n: number }>, _ctx: LeaseTaskContext) {
    this.runs.push({ key: task.payload.key, n: task.payload.n, start: now() });
    if (this.holdMs > 0) await sleep(this.holdMs);
  }
}

describe('debounce', () => {
  let db: TestDatabase;
  const instances: QueueApp[] = [];
  const handlers = () => instances.map((qa) => qa.app.get(Debounced));
  const runs = (key: string) => handlers().flatMap((h) => h.runs.filter((r) => r.key === key)).sort((a, b) => a.start - b.start);
  const taskCount = async () => (await db.sql(`SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = 'db.q'`))[0].n as number;
  const idle = () => waitFor('no db.q task left', async () => (await taskCount()) === 0, { timeoutMs: 20_000, everyMs: 20 });

  beforeAll(async () => {
    db = await createTestDatabase();
    for (const name of ['d1', 'd2', 'd3']) {
      instances.push(await bootQueueApp(db.prisma(4), [Debounced], { databaseUrl: db.url, workerId: name, pollIntervalMs: 5000 }));
    }
  });
  afterAll(async () => {
    for (const qa of instances) await qa.close();
    await db.drop();
  });

  it('trailing: a burst runs once, delayMs after its last request, with the newest payload', async () => {
    const key = 'trail';
    let lastAt = 0;
    for (let n = 1; n <= 5; n++) {
      lastAt = now();
      await instances[n % 3].queue.enqueue('db.q', { key, n }, { debounce: { key, delayMs: 300 } });
      await sleep(60);
    }
    await waitFor('the burst ran', async () => runs(key).length === 1, { timeoutMs: 10_000, everyMs: 20 });
    await idle();
    await sleep(400); // nothing else comes
    const [run] = runs(key);
    expect({ count: runs(key).length, n: run.n }).toEqual({ count: 1, n: 5 });
    expect(run.start - lastAt).toBeGreaterThanOrEqual(300 - 20);
  });

  it('trailing with maxDelayMs: steady requests still run, at most maxDelayMs after the first of each burst', async () => {
    const key = 'capped';
    const firstAt = now();
    let n = 0;
    while (now() - firstAt < 1500) {
      await instances[n % 3].queue.enqueue('db.q', { key, n: ++n }, { debounce: { key, delayMs: 300, maxDelayMs: 500 } });
      await sleep(50);
    }
    await idle();
    const list = runs(key);
    // Requests never stop for 300 ms, so only the cap lets a burst run: every 500 ms or so.
    expect(list.length).toBeGreaterThanOrEqual(2);
    expect(list[0].start - firstAt).toBeLessThan(500 + 400);
    // The last burst ends with the last request and runs with it.
    expect(list[list.length - 1].n).toBe(n);
  });

  it('leading: the first request runs at once, the rest of the burst fold into one trailing run; a quiet key leads again', async () => {
    const key = 'lead';
    const t0 = now();
    for (let n = 1; n <= 6; n++) {
      await instances[n % 3].queue.enqueue('db.q', { key, n }, { debounce: { key, delayMs: 300, mode: 'leading' } });
      await sleep(40);
    }
    await idle();
    await sleep(400);
    expect(runs(key).map((r) => r.n)).toEqual([1, 6]);
    expect(runs(key)[0].start - t0).toBeLessThan(250); // at once, not after delayMs
    // The burst is over (quiet for more than delayMs): the next request leads a new one.
    await instances[0].queue.enqueue('db.q', { key, n: 7 }, { debounce: { key, delayMs: 300, mode: 'leading' } });
    await idle();
    await sleep(400);
    expect(runs(key).map((r) => r.n)).toEqual([1, 6, 7]);
  });

  it('simultaneous requests from three instances: one run per burst (trailing), one leading run plus one trailing (leading)', async () => {
    const requests = (key: string, mode: 'trailing' | 'leading') =>
      Promise.all(
        Array.from({ length: 30 }, (_, i) =>
          instances[i % 3].queue.enqueue('db.q', { key, n: i + 1 }, { debounce: { key, delayMs: 400, mode } }),
        ),
      );
    const trailingIds = await requests('many.trail', 'trailing');
    expect(new Set(trailingIds).size).toBe(1); // every request got the one burst's task
    await requests('many.lead', 'leading');
    await idle();
    await sleep(500);
    expect(runs('many.trail').length).toBe(1);
    expect(runs('many.lead').length).toBe(2);
  });

  it('a request while the burst runs starts a new burst: the run does not swallow it', async () => {
    const key = 'during';
    for (const h of handlers()) h.holdMs = 400;
    try {
      await instances[0].queue.enqueue('db.q', { key, n: 1 }, { debounce: { key, delayMs: 100 } });
      await waitFor('the first run started', async () => runs(key).length === 1, { timeoutMs: 10_000, everyMs: 10 });
      await instances[1].queue.enqueue('db.q', { key, n: 2 }, { debounce: { key, delayMs: 100 } });
      await waitFor('the second run started', async () => runs(key).length === 2, { timeoutMs: 10_000, everyMs: 10 });
      await idle();
    } finally {
      for (const h of handlers()) h.holdMs = 0;
    }
    expect(runs(key).map((r) => r.n)).toEqual([1, 2]);
  });

  it('bad debounce options are typed errors naming the option and write nothing', async () => {
    const before = await taskCount();
    const bad: [object, string][] = [
      [{ delayMs: 100 }, 'debounce.key'],
      [{ key: '', delayMs: 100 }, 'debounce.key'],
      [{ key: 'k', delayMs: 0 }, 'debounce.delayMs'],
      [{ key: 'k', delayMs: 1.5 }, 'debounce.delayMs'],
      [{ key: 'k', delayMs: 100, maxDelayMs: 50 }, 'debounce.maxDelayMs'],
      [{ key: 'k', delayMs: 100, mode: 'middle' }, 'debounce.mode'],
    ];
    for (const [debounce, option] of bad) {
      const err = await instances[0].queue.enqueue('db.q', { key: 'bad', n: 0 }, { debounce: debounce as never }).catch((e: unknown) => e);
      expect({ debounce, error: err instanceof InvalidEnqueueOptionsError ? err.option : err }).toEqual({ debounce, error: option });
    }
    const combined = await instances[0].queue
      .enqueue('db.q', { key: 'bad', n: 0 }, { debounce: { key: 'k', delayMs: 100 }, delayMs: 5 })
      .catch((e: unknown) => e);
    expect(combined).toBeInstanceOf(InvalidEnqueueOptionsError);
    expect(await taskCount()).toBe(before);
  });

  it('quiet keys of leading debounce are pruned', async () => {
    await db.sql(`UPDATE pgqueue.task_debounce SET quiet_until = now() - interval '1 second'`);
    const [{ n }] = await db.sql('SELECT count(*)::int AS n FROM pgqueue.task_debounce');
    expect(n).toBeGreaterThan(0);
    await instances[0].app.get(WorkerOrchestrator).pruneHistory();
    expect((await db.sql('SELECT count(*)::int AS n FROM pgqueue.task_debounce'))[0].n).toBe(0);
  });
});
