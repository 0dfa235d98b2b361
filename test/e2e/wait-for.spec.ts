/**
 * Results awaited across processes (issue 27, item 5): `waitFor(id)` in one app instance for a task
 * another instance's worker runs, woken by NOTIFY (no instance polls within the test: poll
 * intervals are two minutes, and waitFor has no poll of its own); the cross-process stream
 * `watch()`, progress included; and the hot path's promise that a completion nobody waits for sends no notice.
 */
import { Injectable } from '@nestjs/common';
import { Client } from 'pg';
import { filter, firstValueFrom, take, toArray } from 'rxjs';
import { TaskFailedError, TaskHandler, TaskNotFoundError, WaitForTimeoutError, type AnyTaskContext, type Task, type WatchedTaskEvent } from '@app/pg-queue';
import { notifyChannel } from '../../libs/pg-queue/src/sql/identifiers';
import { deferred } from '../support/queue-app';
import { waitFor } from '../support/wait-for';
import { workerAndApi } from '../support/worker-and-api';

let hold = { started: deferred(), release: deferred() };

@Injectable()
class WaitHandlers {
  @TaskHandler('wait.work', { mode: 'lease' })
  async work(task: Task<{ n: number; hold?: boolean; fail?: string }>) {
    if (task.payload.hold) {
      hold.started.resolve();
      await hold.release.promise;
    }
    if (task.payload.fail) throw new Error(task.payload.fail);
    return { doubled: task.payload.n * 2 };
  }

  /** Reports three progress values, a second apart (the reporter writes at most one a second). */
  @TaskHandler('wait.progress', { mode: 'lease' })
  async progress(_task: Task, ctx: AnyTaskContext) {
    for (let done = 1; done <= 3; done++) {
      ctx.progress({ done, of: 3 });
      await new Promise((r) => setTimeout(r, 1100));
    }
  }

  @TaskHandler('wait.flaky', { mode: 'transactional', maxAttempts: 2, backoff: { type: 'fixed', delayMs: 1 } })
  async flaky(task: Task<{ n: number }>) {
    if (task.attempt === 1) throw new Error('first attempt fails');
    return task.payload.n;
  }
}

describe('waitFor and watch across processes', () => {
  const ctx = workerAndApi([WaitHandlers], 4, () => hold.release.resolve());
  const api = { get queue() { return ctx.api.queue; } };
  const worker = { get queue() { return ctx.worker.queue; } };
  const db = { sql: <T = any>(text: string, values?: unknown[]) => ctx.db.sql<T>(text, values), get url() { return ctx.db.url; } };
  beforeEach(() => {
    hold = { started: deferred(), release: deferred() };
  });

  const watched = async (id: string) => (await db.sql<{ watched: boolean | null }>('SELECT watched FROM pgqueue.task WHERE id = $1', [id]))[0]?.watched === true;

  it("resolves in one instance with the result of a task another instance's worker runs", async () => {
    const id = await api.queue.enqueue('wait.work', { n: 21, hold: true });
    await hold.started.promise;
    const result = api.queue.waitFor<{ doubled: number }>(id, { timeoutMs: 60_000 });
    await waitFor('the wait to be registered', () => watched(id));
    hold.release.resolve();
    await expect(result).resolves.toEqual({ doubled: 42 });
  });

  it('resolves at once for a task that already ended, and rejects at once for one that died or does not exist', async () => {
    const id = await api.queue.enqueue('wait.work', { n: 5 });
    await waitFor('the task to end', async () => (await api.queue.get(id))?.state === 'done');
    await expect(api.queue.waitFor(id, { timeoutMs: 60_000 })).resolves.toEqual({ doubled: 10 });

    const dead = await api.queue.enqueue('wait.work', { n: 1, fail: 'no luck' }, { maxAttempts: 1 });
    await waitFor('the task to die', async () => (await api.queue.get(dead))?.state === 'dead');
    const err = await api.queue.waitFor(dead, { timeoutMs: 60_000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TaskFailedError);
    expect(err).toMatchObject({ taskId: dead, state: 'dead', lastError: expect.stringContaining('no luck') });

    await expect(api.queue.waitFor('999999999', { timeoutMs: 60_000 })).rejects.toBeInstanceOf(TaskNotFoundError);
  });

  it('rejects with WaitForTimeoutError when the task has not ended in time (the task goes on)', async () => {
    const id = await api.queue.enqueue('wait.work', { n: 2, hold: true });
    await hold.started.promise;
    const err = await api.queue.waitFor(id, { timeoutMs: 300 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WaitForTimeoutError);
    expect(err).toMatchObject({ taskId: id, timeoutMs: 300 });
    hold.release.resolve();
    await expect(api.queue.waitFor(id, { timeoutMs: 60_000 })).resolves.toEqual({ doubled: 4 });
  });

  it('rejects with TaskFailedError carrying the last error when the task dies while waited for, or is cancelled', async () => {
    const id = await api.queue.enqueue('wait.work', { n: 3, hold: true, fail: 'handler broke' }, { maxAttempts: 1 });
    await hold.started.promise;
    const result = api.queue.waitFor(id, { timeoutMs: 60_000 }).catch((e: unknown) => e);
    await waitFor('the wait to be registered', () => watched(id));
    hold.release.resolve();
    const err = await result;
    expect(err).toBeInstanceOf(TaskFailedError);
    expect(err).toMatchObject({ taskId: id, state: 'dead', lastError: expect.stringContaining('handler broke') });

    const later = await api.queue.enqueue('wait.work', { n: 4 }, { delayMs: 3_600_000 });
    const cancelled = api.queue.waitFor(later, { timeoutMs: 60_000 }).catch((e: unknown) => e);
    await waitFor('the wait to be registered', () => watched(later));
    expect(await worker.queue.cancel(later)).toBe('cancelled');
    expect(await cancelled).toMatchObject({ taskId: later, state: 'cancelled' });
  });

  it('loses no wake-up when tasks end while the waits are being registered', async () => {
    const ids = await api.queue.enqueueMany(Array.from({ length: 40 }, (_, n) => ({ queue: 'wait.work' as const, payload: { n } })));
    const results = await Promise.all(ids.map((id) => api.queue.waitFor(id, { timeoutMs: 60_000 })));
    expect(results).toEqual(ids.map((_, n) => ({ doubled: n * 2 })));
  });

  it("streams completed, failed and dead events of another instance's tasks; a plain queue's completions send no notice", async () => {
    const listener = new Client({ connectionString: db.url });
    await listener.connect();
    const ended: string[] = [];
    listener.on('notification', (m) => {
      if (m.payload?.startsWith('!ended ')) ended.push(m.payload);
    });
    await listener.query(`LISTEN "${notifyChannel('pgqueue')}"`);
    /** Every notice committed before this call has arrived when it resolves (delivery in commit order). */
    const sentinel = async () => {
      const seen = new Promise<void>((resolve) => listener.on('notification', (m) => m.payload === '!test-sentinel' && resolve()));
      await db.sql(`SELECT pg_notify($1, '!test-sentinel')`, [notifyChannel('pgqueue')]);
      await seen;
    };
    try {
      // Nobody waits or watches: 20 completions, no `!ended`.
      const plain = await api.queue.enqueueMany(Array.from({ length: 20 }, (_, n) => ({ queue: 'wait.work' as const, payload: { n } })));
      await waitFor('the plain tasks to end', async () => (await Promise.all(plain.map((id) => api.queue.get(id)))).every((t) => t?.state === 'done'));
      await sentinel();
      expect(ended).toEqual([]);

      const events: WatchedTaskEvent[] = [];
      const sub = api.queue.watch({ queue: ['wait.flaky', 'wait.work'] }).subscribe((e) => events.push(e));
      await waitFor('the stream to be registered', async () => (await db.sql('SELECT 1 FROM pgqueue.task_watch')).length === 2);
      const flaky = await worker.queue.enqueue('wait.flaky', { n: 7 });
      const dies = await worker.queue.enqueue('wait.work', { n: 1, fail: 'gone' }, { maxAttempts: 1 });
      await waitFor('the events', () => events.some((e) => e.taskId === flaky && e.type === 'completed') && events.some((e) => e.taskId === dies));
      expect(events.filter((e) => e.taskId === flaky).map((e) => e.type)).toEqual(['failed', 'completed']);
      expect(events.filter((e) => e.taskId === dies)).toEqual([{ type: 'dead', taskId: dies, queue: 'wait.work' }]);

      // A stream of one queue sees no other queue's events.
      const onlyFlaky = firstValueFrom(worker.queue.watch({ queue: 'wait.flaky' }).pipe(filter((e) => e.type === 'completed'), take(1), toArray()));
      await waitFor('the second stream', async () => (await db.sql('SELECT 1 FROM pgqueue.task_watch')).length === 3);
      await api.queue.enqueue('wait.work', { n: 0 });
      const second = await api.queue.enqueue('wait.flaky', { n: 8 });
      expect((await onlyFlaky).map((e) => e.taskId)).toEqual([second]);

      sub.unsubscribe();
      await waitFor('the streams to be gone', async () => (await db.sql('SELECT 1 FROM pgqueue.task_watch')).length === 0);
      ended.length = 0;
      const after = await api.queue.enqueue('wait.work', { n: 9 });
      await waitFor('the task to end', async () => (await api.queue.get(after))?.state === 'done');
      await sentinel();
      expect(ended).toEqual([]);
    } finally {
      await listener.end();
    }
  });

  it("streams the progress another instance's task reports, in order, then its completion", async () => {
    const events: WatchedTaskEvent[] = [];
    const sub = api.queue.watch({ queue: 'wait.progress' }).subscribe((e) => events.push(e));
    try {
      await waitFor('the stream to be registered', async () => (await db.sql("SELECT 1 FROM pgqueue.task_watch WHERE queue = 'wait.progress'")).length === 1);
      const id = await worker.queue.enqueue('wait.progress', {});
      await waitFor('the completion event', () => events.some((e) => e.taskId === id && e.type === 'completed'), { timeoutMs: 20_000 });
      expect(events.filter((e) => e.taskId === id)).toEqual([
        { type: 'progress', taskId: id, queue: 'wait.progress', progress: { done: 1, of: 3 } },
        { type: 'progress', taskId: id, queue: 'wait.progress', progress: { done: 2, of: 3 } },
        { type: 'progress', taskId: id, queue: 'wait.progress', progress: { done: 3, of: 3 } },
        { type: 'completed', taskId: id, queue: 'wait.progress' },
      ]);
    } finally {
      sub.unsubscribe();
    }
  }, 30_000);
});
