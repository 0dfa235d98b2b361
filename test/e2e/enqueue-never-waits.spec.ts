import { Injectable } from '@nestjs/common';
import { TaskHandler, type AnyTaskContext, type Task, type LeaseTaskContext, type TaskContext } from '@app/pg-queue';
import { bootQueueApp, deferred, nextEvents, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

const HANDLER_TIMEOUT_MS = 5000;

/** Each handler holds its first run until the test lets it go, and records every payload it ran with. */
@Injectable()
class HeldHandlers {
  runs: string[] = [];
  started = deferred();
  release = deferred();
  aborted = deferred<string>();

  private async hold(task: Task<{ v: string }>, ctx: AnyTaskContext) {
    this.runs.push(task.payload.v);
    if (this.runs.length > 1) return;
    this.started.resolve();
    ctx.signal.addEventListener('abort', () => this.aborted.resolve('handler timed out first'));
    await Promise.race([this.release.promise, new Promise((resolve) => ctx.signal.addEventListener('abort', resolve))]);
  }

  @TaskHandler('nw.tx', { timeoutMs: HANDLER_TIMEOUT_MS })
  async tx(task: Task<{ v: string }>, ctx: TaskContext) {
    // A business write, so the handler's transaction is a real one.
    await ctx.tx.$executeRawUnsafe('SELECT 1');
    await this.hold(task, ctx);
  }

  @TaskHandler('nw.lease', { mode: 'lease', timeoutMs: HANDLER_TIMEOUT_MS })
  async lease(task: Task<{ v: string }>, ctx: LeaseTaskContext) {
    await this.hold(task, ctx);
  }
}

describe('enqueue never waits for a running handler (docs/design.md, "Enqueue never waits for a handler")', () => {
  let db: TestDatabase;
  let qa: QueueApp;
  let handlers: HeldHandlers;

  beforeAll(async () => {
    db = await createTestDatabase();
    qa = await bootQueueApp(db.prisma(), [HeldHandlers], { databaseUrl: db.url });
    handlers = qa.app.get(HeldHandlers);
  });
  afterAll(async () => {
    handlers.release.resolve();
    await qa.close();
    await db.drop();
  });

  it.each(['nw.tx', 'nw.lease'])('%s: rerun and replace requests return while the handler runs; one more run with the newest payload', async (queue) => {
    Object.assign(handlers, { runs: [], started: deferred(), release: deferred(), aborted: deferred<string>() });
    await qa.queue.enqueue(queue, { v: 'v1' }, { key: 'k' });
    await handlers.started.promise;

    const requests = (async () => {
      await qa.queue.enqueue(queue, { v: 'v2' }, { key: 'k', onConflict: 'rerun' });
      await qa.queue.enqueue(queue, { v: 'v3' }, { key: 'k', onConflict: 'rerun' });
      // replace touches only a pending task: the running one keeps its rerun payload.
      await qa.queue.enqueue(queue, { v: 'ignored' }, { key: 'k', onConflict: 'replace' });
      return 'requests returned while the handler ran';
    })();
    // Before the fix the requests waited for the handler's row lock, i.e. until its timeout.
    expect(await Promise.race([requests, handlers.aborted.promise])).toBe('requests returned while the handler ran');

    const rerunDone = nextEvents(qa.queue.events$, (e) => e.queue === queue && e.type === 'completed', 2);
    handlers.release.resolve();
    await rerunDone;
    expect(handlers.runs).toEqual(['v1', 'v3']);
    const live = await db.sql('SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = $1', [queue]);
    expect(live).toEqual([{ n: 0 }]);
    const archived = await db.sql("SELECT payload FROM pgqueue.task_archive WHERE queue = $1 AND state = 'done'", [queue]);
    expect(archived).toEqual([{ payload: { v: 'v3' } }]);
  });
});
