import { Injectable } from '@nestjs/common';
import { TaskHandler, type Task, type LeaseTaskContext, type TaskContext } from '@app/pg-queue';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import { drainQueue } from '@app/pg-queue/testing';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

/** Every JSON value a payload may be, including the ones a JSON row encoding could lose. */
const PAYLOADS: unknown[] = [
  null,
  0,
  -1.5e300,
  'text with "quotes", a \\ backslash,\nnewline, tab\t, é, 😀 and , commas',
  '',
  true,
  [],
  [null, { a: [1, 'b'] }],
  {},
  { nested: { deep: [null, false, 'x'] }, n: 123456789012 },
];

@Injectable()
class Echo {
  readonly seen = new Map<string, unknown[]>();

  private note(queue: string, payload: unknown): void {
    this.seen.set(queue, [...(this.seen.get(queue) ?? []), payload]);
  }

  @TaskHandler('values.tx')
  async tx(task: Task<unknown>, ctx: TaskContext) {
    this.note('values.tx', task.payload);
    await ctx.enqueue('values.lease', task.payload); // follow-up from a transactional handler
  }

  @TaskHandler('values.lease', { mode: 'lease' })
  async lease(task: Task<unknown>, ctx: LeaseTaskContext) {
    this.note('values.lease', task.payload);
    await ctx.enqueue('values.last', task.payload); // follow-up from a lease handler
  }

  @TaskHandler('values.last')
  async last(task: Task<unknown>) {
    this.note('values.last', task.payload);
  }
}

describe('payload values', () => {
  let db: TestDatabase;
  let qa: QueueApp;
  beforeAll(async () => {
    db = await createTestDatabase();
    qa = await bootQueueApp(db.prisma(), [Echo], { autoStart: false });
  });
  afterAll(async () => {
    await qa?.close();
    await db.drop();
  });

  // jsonb keeps object keys in its own order: compare with keys sorted.
  const canonical = (v: unknown): string =>
    JSON.stringify(v, (_k, x: unknown) =>
      x !== null && typeof x === 'object' && !Array.isArray(x) ? Object.fromEntries(Object.entries(x).sort(([a], [b]) => (a < b ? -1 : 1))) : x,
    );
  const sorted = (values: unknown[]) => values.map(canonical).sort();

  it('arrive unchanged through enqueue, enqueueMany and follow-ups of both modes (null included)', async () => {
    for (const payload of PAYLOADS.slice(0, 5)) await qa.queue.enqueue('values.tx', payload);
    await qa.queue.enqueueMany(PAYLOADS.slice(5).map((payload) => ({ queue: 'values.tx', payload })));
    await drainQueue(qa.app);
    const echo = qa.app.get(Echo);
    for (const queue of ['values.tx', 'values.lease', 'values.last']) {
      expect({ queue, payloads: sorted(echo.seen.get(queue) ?? []) }).toEqual({ queue, payloads: sorted(PAYLOADS) });
    }
    expect(await db.sql("SELECT count(*)::int AS n FROM pgqueue.task WHERE queue LIKE 'values.%'")).toEqual([{ n: 0 }]);
  });

  // A claim returns its rows as one JSON text: with a payload limit of 48 MiB, at most two rows fit
  // the 128 MiB claim budget, whatever batchSize says.
  it('claims no more rows than the largest allowed payloads can carry in one claim', async () => {
    const big = await bootQueueApp(db.prisma(2), [Echo], { autoStart: false, maxPayloadBytes: 48 * 1024 * 1024 });
    try {
      const repo = big.app.get(TaskRepository);
      const limits: number[] = [];
      const claim = repo.claim.bind(repo);
      jest.spyOn(repo, 'claim').mockImplementation((db, queue, limit, ...rest) => {
        limits.push(limit);
        return claim(db, queue, limit, ...rest);
      });
      await big.queue.enqueueMany(Array.from({ length: 5 }, (_, i) => ({ queue: 'values.last', payload: { i } })));
      await drainQueue(big.app, 'values.last');
      expect(limits.length).toBeGreaterThanOrEqual(3);
      expect(Math.max(...limits)).toBe(2);
      expect(await db.sql("SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = 'values.last'")).toEqual([{ n: 0 }]);
    } finally {
      await big.close();
    }
  });
});
