import { Injectable } from '@nestjs/common';
import { TaskHandler, type Task, type TaskContext } from '@app/pg-queue';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import { drainQueue, rescueExpiredLeases, tickSchedules } from '@app/pg-queue/testing';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

/** The worker process's handlers: their options, not the enqueuer's module defaults, govern the tasks. */
@Injectable()
class WorkerHandlers {
  runs = 0;

  @TaskHandler('split.tx', { maxAttempts: 2, backoff: { type: 'fixed', delayMs: 0 } })
  async tx(_task: Task) {
    this.runs++;
    throw new Error('always fails');
  }

  @TaskHandler('split.lease', { mode: 'lease', maxAttempts: 2, backoff: { type: 'fixed', delayMs: 0 } })
  async lease(_task: Task) {
    this.runs++;
    throw new Error('always fails');
  }

  /** Enqueues a follow-up into a queue this process does not handle. */
  @TaskHandler('split.parent')
  async parent(_task: Task, ctx: TaskContext) {
    await ctx.enqueue('split.elsewhere', {});
  }
}

/** A second worker process, the only one that handles `split.elsewhere`. */
@Injectable()
class ElsewhereHandlers {
  runs = 0;

  @TaskHandler('split.elsewhere', { maxAttempts: 3, backoff: { type: 'fixed', delayMs: 0 } })
  async elsewhere(_task: Task) {
    this.runs++;
    throw new Error('always fails');
  }
}

describe('split producer and worker apps: the handler where a task runs governs it (docs/design.md, "Where settings live")', () => {
  let db: TestDatabase;
  let api: QueueApp;
  let worker: QueueApp;
  let elsewhere: QueueApp;

  beforeAll(async () => {
    db = await createTestDatabase();
    // The documented API-only process: no handler, no workers, module defaults (maxAttempts 5).
    api = await bootQueueApp(db.prisma(), [], {
      autoStart: false,
      schedules: [{ name: 'split.tick', queue: 'split.tx', everyMs: 1000 }],
    });
    worker = await bootQueueApp(db.prisma(), [WorkerHandlers], { autoStart: false, handlerDefaults: { maxAttempts: 9 } });
    elsewhere = await bootQueueApp(db.prisma(), [ElsewhereHandlers], { autoStart: false });
  });
  afterAll(async () => {
    await Promise.all([api.close(), worker.close(), elsewhere.close()]);
    await db.drop();
  });
  beforeEach(async () => {
    await db.sql('TRUNCATE pgqueue.task, pgqueue.task_archive');
    worker.app.get(WorkerHandlers).runs = 0;
    elsewhere.app.get(ElsewhereHandlers).runs = 0;
  });

  it.each(['split.tx', 'split.lease'])('%s: a task enqueued by an API-only app dies after the handler\'s maxAttempts', async (queue) => {
    const id = await api.queue.enqueue(queue, {});
    await drainQueue(worker.app, queue);
    expect(await worker.queue.get(id)).toMatchObject({ state: 'dead', attempt: 2, maxAttempts: 2 });
    expect(worker.app.get(WorkerHandlers).runs).toBe(2);
  });

  it('an explicit maxAttempts from the enqueuer wins over the handler', async () => {
    const id = await api.queue.enqueue('split.tx', {}, { maxAttempts: 3 });
    await drainQueue(worker.app, 'split.tx');
    expect(await worker.queue.get(id)).toMatchObject({ state: 'dead', attempt: 3 });
  });

  it('a schedule ticked by the API app follows the handler', async () => {
    // The first tick is due within everyMs (1 s) of startup.
    const until = Date.now() + 10_000;
    while ((await tickSchedules(api.app)) === 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
    await drainQueue(worker.app, 'split.tx');
    const [row] = await db.sql("SELECT state, attempt FROM pgqueue.task WHERE queue = 'split.tx'");
    expect(row).toEqual({ state: 'dead', attempt: 2 });
  });

  it('a follow-up into a queue handled by another process follows that process\'s handler', async () => {
    await api.queue.enqueue('split.parent', {});
    await drainQueue(worker.app, 'split.parent');
    await drainQueue(elsewhere.app, 'split.elsewhere');
    const [row] = await db.sql("SELECT state, attempt FROM pgqueue.task WHERE queue = 'split.elsewhere'");
    expect(row).toEqual({ state: 'dead', attempt: 3 });
    expect(elsewhere.app.get(ElsewhereHandlers).runs).toBe(3);
  });

  it('the rescuer applies the limit recorded by the claim of the handler that ran it', async () => {
    const id = await api.queue.enqueue('split.tx', {});
    const repo = worker.app.get(TaskRepository, { strict: false });
    const prisma = db.prisma();
    // Two workers that died holding the task (1 ms leases), each claiming as split.tx's handler does.
    for (const expected of [{ rescued: 1, dead: 0 }, { rescued: 1, dead: 1 }]) {
      const [row] = (await repo.claim(prisma, 'split.tx', 1, 'gone-worker', 1, 2)).rows;
      expect(row.id).toBe(id);
      await db.sql("UPDATE pgqueue.task SET locked_until = now() - interval '1 second' WHERE id = $1", [id]);
      expect(await rescueExpiredLeases(worker.app)).toEqual(expected);
    }
    expect(await worker.queue.get(id)).toMatchObject({ state: 'dead', attempt: 2 });
  });
});
