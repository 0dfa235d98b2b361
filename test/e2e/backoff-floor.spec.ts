/**
 * A back-off of 0 ms (a downstream answering `429, Retry-After: 0` for ever, or a handler calling
 * ctx.coolDown(0)) gives the task back uncounted and due at once: without a floor on the delay the
 * worker claims it again at once, hundreds of times a second. With the floor (MIN_COOLDOWN_MS) the
 * runs are spaced by it. Counts, not timings: the bound allows 2 times what the floor permits (without
 * it: 18-95 runs a second measured on a loaded and a quiet 2-core machine).
 */
import { Injectable } from '@nestjs/common';
import { MIN_BACK_OFF_MS, RateLimitedError, TaskHandler, type LeaseTaskContext, type Task } from '@app/pg-queue';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { pause, waitFor } from '../support/wait-for';

/** Runs of each queue's handler, by the time they started. */
const runs = new Map<string, number[]>();
const ran = (queue: string) => runs.set(queue, [...(runs.get(queue) ?? []), performance.now()]);

@Injectable()
class Refused {
  @TaskHandler('zero.task', { mode: 'lease' })
  async task(_task: Task, _ctx: LeaseTaskContext) {
    ran('zero.task');
    throw new RateLimitedError({ retryAfterMs: RateLimitedError.retryAfterMs('0') ?? 1000, scope: 'task' });
  }

  @TaskHandler('zero.queue', { mode: 'lease' })
  async queue(_task: Task, ctx: LeaseTaskContext) {
    ran('zero.queue');
    ctx.coolDown(0, { scope: 'queue' });
  }
}

describe('a back-off of 0 ms', () => {
  let db: TestDatabase;
  let app: QueueApp;

  beforeAll(async () => {
    db = await createTestDatabase();
    app = await bootQueueApp(db.prisma(6), [Refused], { workerId: 'zero-0', databaseUrl: db.url });
  }, 60_000);

  afterAll(async () => {
    await app.close();
    await db.drop();
  });

  it.each(['zero.task', 'zero.queue'])('%s: runs spaced by the floor, no attempt counted', async (queue) => {
    const id = await app.queue.enqueue(queue, {});
    await waitFor(`${queue} ran`, () => (runs.get(queue) ?? []).length > 0);
    const before = runs.get(queue)!.length;
    const started = performance.now();
    await pause(2000); // about 8 runs with the floor
    const perSecond = ((runs.get(queue)!.length - before) * 1000) / (performance.now() - started);
    console.log(`${queue}: ${perSecond.toFixed(1)} runs/s`);
    expect(perSecond).toBeLessThan((1000 / MIN_BACK_OFF_MS) * 2);
    const row = await app.queue.get(id);
    expect(row).toMatchObject({ attempt: expect.any(Number), lastError: null });
    expect(row!.attempt).toBeLessThanOrEqual(1);
    await app.queue.cancel(id);
  }, 60_000);
});
