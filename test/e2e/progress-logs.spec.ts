/**
 * ctx.progress and ctx.log (issue 27, items 1 and 2): progress written at most about once a second
 * whatever the call rate, shown by get/list and published as events; logs kept across a
 * transactional rollback, with every failed attempt's error and run time, bounded, archived with
 * the task; and a stale instance whose lease was lost writes neither.
 */
import { Injectable } from '@nestjs/common';
import { InvalidArgumentError, TaskHandler, type LeaseTaskContext, type Task, type TaskContext, type TaskEvent } from '@app/pg-queue';
import { drainQueue, rescueExpiredLeases } from '@app/pg-queue/testing';
import { bootQueueApp, deferred, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { pause, waitFor } from '../support/wait-for';

const RATE = { calls: 0, seen: deferred() };
const stale = { started: deferred(), go: deferred(), after: deferred<string[]>() };
const bad: { errors: unknown[] } = { errors: [] };

@Injectable()
class ReportHandlers {
  /** Reports progress as fast as it can for about two seconds. */
  @TaskHandler('report.rate', { mode: 'lease' })
  async rate(_task: Task, ctx: LeaseTaskContext) {
    const until = Date.now() + 2200;
    const of = 1000;
    for (let done = 0; Date.now() < until; done = Math.min(of - 1, done + 1)) {
      ctx.progress({ done, of });
      RATE.calls++;
      if (RATE.calls === 50) RATE.seen.resolve();
      await pause(1);
    }
    ctx.progress({ done: of, of });
  }

  /** Logs, then fails its first attempt after writing in its transaction; the second succeeds. */
  @TaskHandler('report.tx', { backoff: { type: 'fixed', delayMs: 10 } })
  async tx(task: Task, ctx: TaskContext) {
    ctx.log(`attempt ${task.attempt} begins`);
    ctx.progress({ done: task.attempt, of: 2 });
    await ctx.tx.$executeRawUnsafe('SELECT 1');
    if (task.attempt === 1) {
      await pause(30);
      throw new Error('first attempt fails');
    }
    ctx.log(`attempt ${task.attempt} ends`);
  }

  @TaskHandler('report.many', { mode: 'lease' })
  async many(_task: Task, ctx: LeaseTaskContext) {
    for (let i = 0; i < 300; i++) ctx.log(`line ${i}`);
    ctx.log('x'.repeat(5000));
    for (const attempt of [() => ctx.progress({ blob: 'y'.repeat(2000) }), () => ctx.progress({ n: 1n }), () => ctx.log(42 as unknown as string)]) {
      try {
        attempt();
      } catch (err) {
        bad.errors.push(err);
      }
    }
  }

  /** Attempt 1 (instance A) waits to be overtaken; attempt 2 (instance B) finishes. */
  @TaskHandler('report.stale', { mode: 'lease', leaseMs: 60_000 })
  async stale(task: Task, ctx: LeaseTaskContext) {
    if (task.attempt > 1) {
      ctx.progress({ done: 2, of: 2, by: 'B' });
      ctx.log('B was here');
      return;
    }
    ctx.log('A starts');
    stale.started.resolve();
    await stale.go.promise;
    const thrown: string[] = [];
    try {
      ctx.progress({ done: 1, of: 2, by: 'A' });
      ctx.log('A after losing its lease');
    } catch (err) {
      thrown.push((err as Error).name);
    }
    stale.after.resolve(thrown);
  }
}

describe('task progress and logs', () => {
  let db: TestDatabase;
  const apps: QueueApp[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    stale.go.resolve();
    for (const a of apps) await a.close().catch(() => undefined);
    await db.drop();
  });

  const boot = async (options: Parameters<typeof bootQueueApp>[2] = {}) => {
    const qa = await bootQueueApp(db.prisma(4), [ReportHandlers], options);
    apps.push(qa);
    return qa;
  };

  it('writes progress at most about once a second whatever the call rate; get, list and events show it; the last value stays with the archived task', async () => {
    const qa = await boot();
    const events: TaskEvent[] = [];
    const sub = qa.queue.events$.subscribe((e) => e.type === 'progress' && events.push(e));
    const id = await qa.queue.enqueue('report.rate', {});
    await RATE.seen.promise;
    const began = Date.now();
    // Visible while it runs.
    const running = await waitFor('progress while running', async () => {
      const t = await qa.queue.get(id);
      return t?.state === 'running' && t.progress !== null ? t : null;
    });
    expect(running.progress).toEqual({ done: expect.any(Number), of: 1000 });
    const listed = await qa.queue.list({ queue: 'report.rate' });
    expect(listed[0].progress).toEqual({ done: expect.any(Number), of: 1000 });
    const done = await waitFor('done', async () => ((await qa.queue.get(id))?.state === 'done' ? qa.queue.get(id) : null));
    const elapsedS = (Date.now() - began) / 1000;
    sub.unsubscribe();
    expect(done.progress).toEqual({ done: 1000, of: 1000 });
    expect(RATE.calls).toBeGreaterThan(200);
    // One write a second while it ran, plus the last one at its end (and one for the first call).
    expect(events.length).toBeGreaterThanOrEqual(2);
    expect(events.length).toBeLessThanOrEqual(Math.ceil(elapsedS) + 3);
    expect(events.at(-1)).toMatchObject({ type: 'progress', taskId: id, queue: 'report.rate', attempt: 1, progress: { done: 1000, of: 1000 } });
    await qa.close();
    apps.splice(apps.indexOf(qa), 1);
  });

  it("keeps a transactional attempt's lines through its rollback, with each failed attempt's error and run time; archived with the task", async () => {
    const qa = await boot({ autoStart: false });
    const id = await qa.queue.enqueue('report.tx', {});
    await drainQueue(qa.app, 'report.tx');
    await waitFor('retried and done', async () => {
      await drainQueue(qa.app, 'report.tx');
      return (await qa.queue.get(id))?.state === 'done';
    });
    const logs = await qa.queue.getLogs(id);
    expect(logs!.map(({ attempt, kind, message }) => ({ attempt, kind, message }))).toEqual([
      { attempt: 1, kind: 'log', message: 'attempt 1 begins' },
      { attempt: 1, kind: 'error', message: expect.stringContaining('first attempt fails') },
      { attempt: 2, kind: 'log', message: 'attempt 2 begins' },
      { attempt: 2, kind: 'log', message: 'attempt 2 ends' },
    ]);
    expect(logs![1].durationMs).toBeGreaterThanOrEqual(25);
    expect(logs![0].durationMs).toBeNull();
    expect(logs![0].at).toBeInstanceOf(Date);
    expect(logs![3].at.getTime()).toBeGreaterThanOrEqual(logs![0].at.getTime());
    // Read from the archive: the columns moved with the row.
    expect(await db.sql('SELECT jsonb_array_length(log) AS n, progress FROM pgqueue.task_archive WHERE id = $1', [id])).toEqual([{ n: 4, progress: { done: 2, of: 2 } }]);
    expect(await qa.queue.getLogs('999999999')).toBeNull();
    await qa.close();
    apps.splice(apps.indexOf(qa), 1);
  });

  it('bounds a log to its newest 200 entries and a line to 2048 bytes; refuses progress that is too large or not JSON and a line that is not a string', async () => {
    const qa = await boot({ autoStart: false });
    const id = await qa.queue.enqueue('report.many', {});
    await drainQueue(qa.app, 'report.many');
    const logs = (await qa.queue.getLogs(id))!;
    expect(logs).toHaveLength(200);
    expect(logs[0].message).toBe('line 101');
    expect(logs[198].message).toBe('line 299');
    expect(logs[199].message).toMatch(/^x+…\[truncated\]$/);
    expect(Buffer.byteLength(logs[199].message)).toBeLessThanOrEqual(2048);
    expect(bad.errors).toHaveLength(3);
    for (const err of bad.errors) expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((bad.errors[0] as Error).message).toMatch(/over the 1024-byte limit/);
    expect((bad.errors[1] as Error).message).toMatch(/BigInt/);
    expect((bad.errors[2] as Error).message).toMatch(/ctx\.log takes a string, got number/);
    await qa.close();
    apps.splice(apps.indexOf(qa), 1);
  });

  it("refuses a stale instance's progress and log once its lease was lost and another instance took the task", async () => {
    const a = await boot();
    const b = await boot({ autoStart: false });
    const id = await a.queue.enqueue('report.stale', {});
    await stale.started.promise;
    await waitFor("A's first line", async () => (await a.queue.getLogs(id))?.length === 1);
    // A's lease runs out (its heartbeat may extend it meanwhile: repeat until the rescue takes it).
    await waitFor('rescued', async () => {
      await db.sql("UPDATE pgqueue.task SET locked_until = now() - interval '1 second' WHERE id = $1 AND state = 'running'", [id]);
      await rescueExpiredLeases(b.app);
      return (await b.queue.get(id))?.state === 'pending';
    });
    expect(await drainQueue(b.app, 'report.stale')).toBe(1);
    stale.go.resolve();
    expect(await stale.after.promise).toEqual([]);
    // A's attempt ends lost; nothing it reported after losing the lease was written.
    await pause(1500);
    const task = await b.queue.get(id);
    expect(task).toMatchObject({ state: 'done', attempt: 2, progress: { done: 2, of: 2, by: 'B' } });
    const logs = (await b.queue.getLogs(id))!;
    expect(logs.map(({ attempt, kind }) => `${attempt} ${kind}`)).toEqual(['1 log', '1 error', '2 log']);
    expect(logs[1].message).toMatch(/lease expired/);
    expect(logs.map((l) => l.message)).not.toContain('A after losing its lease');
  });
});
