/**
 * Sandboxed handlers (issue 27, item 7): a lease-mode queue whose tasks run in a worker thread or a
 * child process (test/fixtures/sandbox-worker.js). CPU-bound work leaves the app's event loop free
 * (the same work in process blocks it), the main thread keeps the lease by heartbeat, a throw fails
 * the attempt with its name and message, a crash fails only that attempt and the next task gets a
 * new sandbox, a timeout ends a busy loop by terminating its sandbox, and shutdown ends them all.
 */
import { readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Injectable } from '@nestjs/common';
import { TaskHandler, type Task, type TaskInfo } from '@app/pg-queue';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

const MODULE = path.join(__dirname, '../fixtures/sandbox-worker.js');
const BUSY_MS = 1500;
/** Every queue's: one attempt unless a test asks for more, retried at once. */
const RUNS = { mode: 'lease', maxAttempts: 1, backoff: { type: 'fixed', delayMs: 10 } } as const;

/** The same loop as the fixture's, run on the app's own thread. */
function spin(ms: number): void {
  const until = Date.now() + ms;
  while (Date.now() < until);
}

@Injectable()
class CpuHandlers {
  // The sandboxed methods' bodies are never called: the module runs their tasks.
  @TaskHandler('cpu.thread', { ...RUNS, concurrency: 1, sandbox: { module: MODULE } })
  thread(): void {
    throw new Error('called in process');
  }

  @TaskHandler('cpu.process', { ...RUNS, concurrency: 1, sandbox: { module: MODULE, kind: 'process' } })
  process(): void {
    throw new Error('called in process');
  }

  @TaskHandler('slow.thread', { ...RUNS, concurrency: 1, timeoutMs: 1000, sandbox: { module: MODULE } })
  slowThread(): void {
    throw new Error('called in process');
  }

  @TaskHandler('slow.process', { ...RUNS, concurrency: 1, timeoutMs: 1000, sandbox: { module: MODULE, kind: 'process' } })
  slowProcess(): void {
    throw new Error('called in process');
  }

  /** Lease far shorter than the work: only heartbeats from a free main thread keep it. */
  @TaskHandler('cpu.lease', { ...RUNS, leaseMs: 500, sandbox: { module: MODULE } })
  lease(): void {
    throw new Error('called in process');
  }

  @TaskHandler('cpu.inline', RUNS)
  async inline(task: Task<{ ms: number }>): Promise<void> {
    spin(task.payload.ms);
  }
}

/** Where the fixture ran a task (its result). */
interface Where {
  threadId: number;
  pid: number;
  attempt: number;
  runAtIsDate: boolean;
}

describe('sandboxed handlers', () => {
  let db: TestDatabase;
  let qa: QueueApp;

  beforeAll(async () => {
    db = await createTestDatabase();
    qa = await bootQueueApp(db.prisma(6), [CpuHandlers], { databaseUrl: db.url, rescueIntervalMs: 100, pollIntervalMs: 50 }); // LISTEN: a cancel reaches the worker at once
  });
  afterAll(async () => {
    await qa?.close();
    await db?.drop();
  });

  /** Waits for the task to end (done or dead). */
  const ended = (id: string): Promise<TaskInfo> =>
    waitFor(`task ${id} to end`, async () => {
      const t = await qa.queue.get(id);
      return t && (t.state === 'done' || t.state === 'dead') ? t : null;
    }, { everyMs: 20 });

  const run = async (queue: string, payload: object, options: { maxAttempts?: number } = {}) => ended(await qa.queue.enqueue(queue, payload, options));

  /** What `fn` resolved with, and the longest the app's event loop went without running a 10 ms interval meanwhile. */
  async function largestGap<T>(fn: () => Promise<T>): Promise<{ value: T; gap: number }> {
    let last = performance.now();
    let largest = 0;
    const timer = setInterval(() => {
      const now = performance.now();
      largest = Math.max(largest, now - last);
      last = now;
    }, 10);
    try {
      const value = await fn();
      return { value, gap: Math.max(largest, performance.now() - last) };
    } finally {
      clearInterval(timer);
    }
  }

  it.each(['thread', 'process'])('runs CPU-bound work in a %s while the event loop stays free; the same work in process blocks it', async (kind) => {
    const { value: task, gap } = await largestGap(() => run(`cpu.${kind}`, { kind: 'busy', ms: BUSY_MS }));
    expect(task).toMatchObject({ state: 'done', attempt: 1, progress: { done: 1, of: 1 } });
    const where = task.result as Where;
    expect(where.runAtIsDate).toBe(true); // the task crossed by structured clone
    if (kind === 'thread') expect(where.threadId).not.toBe(0);
    else expect(where.pid).not.toBe(process.pid);
    expect(gap).toBeLessThan(BUSY_MS / 3);
    expect((await qa.queue.getLogs(task.id))!.map((l) => l.message)).toEqual([`spinning for ${BUSY_MS} ms`]);

    const inline = await largestGap(() => run('cpu.inline', { ms: BUSY_MS }));
    expect(inline.value.state).toBe('done');
    expect(inline.gap).toBeGreaterThan(BUSY_MS * 0.9);
  });

  it('keeps the lease by heartbeat from the main thread while the sandbox is busy longer than the lease', async () => {
    const id = await qa.queue.enqueue('cpu.lease', { kind: 'busy', ms: 2000 });
    const samples: { held: boolean; until: string }[] = [];
    await waitFor('the task to end', async () => {
      const [row] = await db.sql<{ held: boolean; until: string; state: string }>(
        "SELECT locked_until > now() AS held, locked_until::text AS until, state FROM pgqueue.task WHERE id = $1 AND state = 'running'",
        [id],
      );
      if (row) samples.push(row);
      const t = await qa.queue.get(id);
      return t?.state === 'done' || t?.state === 'dead';
    }, { everyMs: 50 });
    const task = await qa.queue.get(id);
    // Never rescued (rescueIntervalMs 100, leaseMs 500): one attempt, done, its lease extended several times.
    expect(task).toMatchObject({ state: 'done', attempt: 1 });
    expect(samples.length).toBeGreaterThan(5);
    expect(samples.every((s) => s.held)).toBe(true);
    expect(new Set(samples.map((s) => s.until)).size).toBeGreaterThanOrEqual(3);
  });

  describe.each(['thread', 'process'])('in a %s', (kind) => {
    const queue = `cpu.${kind}`;
    const same = (a: Where, b: Where) => (kind === 'thread' ? a.threadId === b.threadId : a.pid === b.pid);

    it('reuses its sandbox from task to task', async () => {
      const a = (await run(queue, { kind: 'ok' })).result as Where;
      const b = (await run(queue, { kind: 'ok' })).result as Where;
      expect(same(a, b)).toBe(true);
    });

    it("fails the attempt with a thrown error's name and message; NonRetryableError by name ends the task dead", async () => {
      const failed = await run(queue, { kind: 'throw', image: 'cat.png' });
      expect(failed).toMatchObject({ state: 'dead', attempt: 1 });
      expect(failed.lastError).toMatch(/^ImageError: bad image cat\.png\n\s+at /); // with the sandbox's stack
      const fatal = await run(queue, { kind: 'fatal' }, { maxAttempts: 3 });
      expect(fatal).toMatchObject({ state: 'dead', attempt: 1 });
      expect(fatal.lastError).toMatch(/^NonRetryableError: not worth retrying/);
    });

    it('fails only the attempt whose sandbox exits or throws outside the task (retried as any failure); the next task gets a new sandbox', async () => {
      const before = (await run(queue, { kind: 'ok' })).result as Where;
      const exited = await run(queue, { kind: 'exit' }, { maxAttempts: 2 });
      expect(exited).toMatchObject({ state: 'dead', attempt: 2 });
      expect(exited.lastError).toMatch(new RegExp(`^SandboxCrashedError: pg-queue: the sandbox running task ${exited.id} of "${queue}" ended before the task did: the (worker thread|child process) exited with code 3`));
      const errors = (await qa.queue.getLogs(exited.id))!.filter((l) => l.kind === 'error');
      expect(errors.map((e) => e.attempt)).toEqual([1, 2]);

      const uncaught = await run(queue, { kind: 'uncaught' });
      expect(uncaught).toMatchObject({ state: 'dead', attempt: 1 });
      expect(uncaught.lastError).toMatch(/ended before the task did: uncaught Error: boom outside the promise/);

      const after = await run(queue, { kind: 'ok' });
      expect(after).toMatchObject({ state: 'done', attempt: 1 });
      expect(same(before, after.result as Where)).toBe(false);
    });

    it('fails the attempt when the sandbox reports a value ctx.log refuses, and ends that sandbox', async () => {
      const began = Date.now();
      const task = await run(queue, { kind: 'bad-log' });
      expect(task).toMatchObject({ state: 'dead', attempt: 1 });
      expect(task.lastError).toMatch(/ctx\.log takes a string, got number/);
      expect(Date.now() - began).toBeLessThan(30_000); // not the fixture's 60 s sleep
    });

    it('ends the busy sandbox of a task cancelled while it runs; the next task gets a new one', async () => {
      const before = (await run(queue, { kind: 'ok' })).result as Where;
      const id = await qa.queue.enqueue(queue, { kind: 'busy', ms: 60_000 });
      await waitFor('the task to run', async () => (await qa.queue.get(id))?.state === 'running', { everyMs: 20 });
      expect(await qa.queue.cancel(id)).toBe('requested');
      // concurrency 1: this runs only once the cancelled task's slot is free
      const after = await run(queue, { kind: 'ok' });
      expect(same(before, after.result as Where)).toBe(false);
      await waitFor('the task to end cancelled', async () => (await qa.queue.get(id))?.state === 'cancelled');
    });

    it('ends a busy loop past timeoutMs by terminating its sandbox; the next task gets a new one', async () => {
      const slow = `slow.${kind}`;
      const before = (await run(slow, { kind: 'ok' })).result as Where;
      const began = Date.now();
      const timedOut = await run(slow, { kind: 'busy', ms: 60_000 });
      expect(timedOut).toMatchObject({ state: 'dead', attempt: 1 });
      expect(timedOut.lastError).toMatch(/^TaskTimeoutError: pg-queue: task \d+ timed out after 1000 ms/);
      expect(Date.now() - began).toBeLessThan(20_000);
      const after = await run(slow, { kind: 'ok' });
      expect(after.state).toBe('done');
      expect(same(before, after.result as Where)).toBe(false);
    });
  });

  it('ends its sandboxes on shutdown: a busy task is given back, its child process is gone', async () => {
    const other = await bootQueueApp(db.prisma(4), [CpuHandlers], { shutdownTimeoutMs: 300 });
    // The first app would take the task too: it stops claiming first.
    await qa.close();
    const pidFile = path.join(os.tmpdir(), `pg-queue-sandbox-${process.pid}.pid`);
    rmSync(pidFile, { force: true });
    const id = await other.queue.enqueue('cpu.process', { kind: 'busy', ms: 60_000, pidFile });
    const pid = await waitFor('the sandbox to start', () => {
      try {
        return Number(readFileSync(pidFile, 'utf8'));
      } catch {
        return 0;
      }
    }, { everyMs: 20 });
    const began = Date.now();
    await other.close();
    expect(Date.now() - began).toBeLessThan(10_000);
    const [row] = await db.sql<{ state: string; attempt: number }>('SELECT state, attempt FROM pgqueue.task WHERE id = $1', [id]);
    expect(row).toEqual({ state: 'pending', attempt: 0 }); // released, the attempt not counted
    await waitFor('the child process to be gone', () => !alive(pid), { timeoutMs: 5000 });
    rmSync(pidFile, { force: true });
  });
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
