import { Injectable } from '@nestjs/common';
import { TaskHandler, WorkerOrchestrator, type Task } from '@app/pg-queue';
import { drainQueue } from '@app/pg-queue/testing';
import { bootQueueApp, deferred, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

type Job = { group: number; seq: number };

@Injectable()
class GroupHandlers {
  runs: { group: number; seq: number; start: number; end: number }[] = [];
  done = deferred();
  expected = 0;

  @TaskHandler('fifo.q', { mode: 'lease', concurrency: 20, batchSize: 20 })
  async fifo(task: Task<Job>) {
    const start = performance.now();
    await new Promise((r) => setTimeout(r, 2));
    this.runs.push({ ...task.payload, start, end: performance.now() });
    if (this.runs.length === this.expected) this.done.resolve();
  }

  order: string[] = [];

  @TaskHandler('retry.q', { maxAttempts: 2, backoff: { type: 'fixed', delayMs: 0 } })
  async retry(task: Task<{ name: string; failFirst?: boolean; failAlways?: boolean }>) {
    this.order.push(`${task.payload.name}#${task.attempt}`);
    if (task.payload.failAlways || (task.payload.failFirst && task.attempt === 1)) throw new Error('not yet');
  }
}

describe('per-group FIFO', () => {
  let db: TestDatabase;
  let qa: QueueApp;
  let h: GroupHandlers;

  beforeAll(async () => {
    db = await createTestDatabase();
    qa = await bootQueueApp(db.prisma(12), [GroupHandlers], { autoStart: false, databaseUrl: db.url });
    h = qa.app.get(GroupHandlers);
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });

  it('a failed task keeps its place: the rest of its group waits for the retry', async () => {
    h.order = [];
    await qa.queue.enqueueMany([
      { queue: 'retry.q', payload: { name: 'a', failFirst: true }, options: { group: 'r1' } },
      { queue: 'retry.q', payload: { name: 'b' }, options: { group: 'r1' } },
    ]);
    await drainQueue(qa.app, 'retry.q');
    expect(h.order).toEqual(['a#1', 'a#2', 'b#1']);
  });

  it('a dead task releases its group', async () => {
    h.order = [];
    await qa.queue.enqueueMany([
      { queue: 'retry.q', payload: { name: 'x', failAlways: true }, options: { group: 'r2' } },
      { queue: 'retry.q', payload: { name: 'y' }, options: { group: 'r2' } },
    ]);
    await drainQueue(qa.app, 'retry.q');
    expect(h.order).toEqual(['x#1', 'x#2', 'y#1']);
  });

  // Last: it starts the background workers.
  it('30 groups x 50 tasks at concurrency 20: order kept within each group, groups run in parallel', async () => {
    const groups = 30;
    const perGroup = 50;
    const items = [];
    for (let seq = 0; seq < perGroup; seq++) {
      for (let group = 0; group < groups; group++) items.push({ queue: 'fifo.q', payload: { group, seq }, options: { group: `g${group}` } });
    }
    await qa.queue.enqueueMany(items);
    h.expected = groups * perGroup;
    const orchestrator = qa.app.get(WorkerOrchestrator);
    await orchestrator.start();
    await h.done.promise;

    for (let group = 0; group < groups; group++) {
      const runs = h.runs.filter((r) => r.group === group);
      // enqueue order within the group
      expect(runs.map((r) => r.seq)).toEqual(Array.from({ length: perGroup }, (_, i) => i));
      // one at a time: each run starts after the previous one ended
      for (let i = 1; i < runs.length; i++) expect(runs[i].start).toBeGreaterThanOrEqual(runs[i - 1].end);
    }
    // different groups overlapped: the most groups running at one instant
    const events = h.runs.flatMap((r) => [
      { t: r.start, d: 1 },
      { t: r.end, d: -1 },
    ]);
    events.sort((a, b) => a.t - b.t || a.d - b.d);
    let running = 0;
    let peak = 0;
    for (const e of events) peak = Math.max(peak, (running += e.d));
    expect(peak).toBeGreaterThanOrEqual(5);
  });
});
