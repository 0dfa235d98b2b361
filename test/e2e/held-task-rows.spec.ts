/**
 * A business transaction that holds a running task's row (the bounded-locks rule): enqueueing a
 * task that depends on a running task (`dependsOn` inside `{ tx }`) locks the parent's row until
 * that transaction commits (FOR NO KEY UPDATE, see dependencies.sql.ts: the link is ordered
 * against the parent's end). The parent's own end waits for the commit; nothing else may: the
 * other tasks of its queue on the same instance, whose completions are batched with it, complete
 * while the row is held (both modes), and in lease mode the heartbeat that extends every lease of
 * the queue at once keeps the others' leases while the row is held.
 */
import { Injectable } from '@nestjs/common';
import { RateLimitedError, TaskHandler, type AnyTaskContext, type Task, type TaskEvent } from '@app/pg-queue';
import { bootQueueApp, deferred, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { holdTaskRow, longestLockWait } from '../support/held-task-row';
import { waitFor } from '../support/wait-for';

/** Per queue: the gated task has started; the test lets it return. */
const gates = new Map(['held.lease', 'held.tx', 'held.beat', 'held.backoff'].map((q) => [q, { started: deferred(), open: deferred() }]));

const reportStarted = deferred();

async function handle(task: Task<{ gated?: boolean }>) {
  const gate = gates.get(task.queue)!;
  if (task.payload.gated) {
    gate.started.resolve();
    await gate.open.promise;
  }
  return task.id;
}

@Injectable()
class Handlers {
  @TaskHandler('held.lease', { mode: 'lease', concurrency: 4 })
  async lease(task: Task<{ gated?: boolean }>, _ctx: AnyTaskContext) {
    return handle(task);
  }

  /** Leases of 1.5 s, extended every 500 ms; the ungated tasks run 4 s. */
  @TaskHandler('held.beat', { mode: 'lease', concurrency: 4, leaseMs: 1500 })
  async beat(task: Task<{ gated?: boolean }>, _ctx: AnyTaskContext) {
    if (!task.payload.gated) await new Promise((r) => setTimeout(r, 4000));
    return handle(task);
  }

  /** Logs a line every 200 ms for 4 s. */
  @TaskHandler('held.report', { mode: 'lease' })
  async report(_task: Task, ctx: AnyTaskContext) {
    reportStarted.resolve();
    for (let i = 0; i < 20; i++) {
      ctx.log(`line ${i}`);
      ctx.progress({ done: i + 1, of: 20 });
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /** Every attempt meets a 429 (the gated one once its gate opens): back-offs of 30 s. */
  @TaskHandler('held.backoff', { mode: 'lease', concurrency: 4 })
  async backOff(task: Task<{ gated?: boolean }>, _ctx: AnyTaskContext) {
    await handle(task);
    throw new RateLimitedError({ retryAfterMs: 30_000, scope: 'task' });
  }

  @TaskHandler('held.tx', { concurrency: 4 })
  async transactional(task: Task<{ gated?: boolean }>, _ctx: AnyTaskContext) {
    return handle(task);
  }
}

/** How long the business transaction holds the parent's row. */
const HOLD_MS = 8000;

describe("a business transaction holding a running task's row", () => {
  let db: TestDatabase;
  let app: QueueApp;
  let prisma: ReturnType<TestDatabase['prisma']>;

  beforeAll(async () => {
    db = await createTestDatabase();
    prisma = db.prisma(8);
    // 'held.after' has no handler here: the dependant stays where settling leaves it.
    app = await bootQueueApp(prisma, [Handlers], { workerId: 'held-rows', databaseUrl: db.url, rescueIntervalMs: 500 });
  }, 60_000);

  afterAll(async () => {
    for (const g of gates.values()) g.open.resolve();
    await app?.close();
    await db?.drop();
  });

  it.each(['held.lease', 'held.tx'] as const)("%s: holds up that task's end only, the queue's other tasks complete meanwhile", async (queue) => {
    const gate = gates.get(queue)!;
    const parent = await app.queue.enqueue(queue, { gated: true });
    await gate.started.promise;

    const holder = (await holdTaskRow(prisma, app.queue, parent, HOLD_MS)).committed;
    const heldSince = Date.now();
    gate.open.resolve(); // the parent's handler returns: its completion meets the held row

    const others = await app.queue.enqueueMany(Array.from({ length: 20 }, () => ({ queue, payload: {} })));
    await waitFor('the other tasks done while the row is held', async () => {
      const [row] = await db.sql<{ n: number }>(`SELECT count(*)::int AS n FROM pgqueue.task WHERE id = ANY ($1::bigint[]) AND state <> 'done'`, [others]);
      return row.n === 0;
    }, { timeoutMs: HOLD_MS - 2000 });
    expect(Date.now() - heldSince).toBeLessThan(HOLD_MS);
    expect((await app.queue.get(parent))?.state).toBe('running');

    await holder;
    await waitFor('the parent done after the commit', async () => (await app.queue.get(parent))?.state === 'done', { timeoutMs: 30_000 });
    // The dependant gets its parent's end (settled just after the parent's completion commits).
    await waitFor('the dependant pending', async () => {
      const [after] = await db.sql<{ state: string }>(`SELECT state FROM pgqueue.task WHERE queue = 'held.after' AND $1::bigint = ANY (depends_on)`, [parent]);
      return after.state === 'pending';
    });
  }, 60_000);

  // Back-offs go in one statement per burst (the completion batcher): the held row must not hold
  // up the others' back-offs, and its own must be written once the row is free, not dropped (its
  // lease would run out into a counted attempt, and a back-off is never counted).
  it('lease mode: back-offs are written for the free rows at once, and for the held one after the commit', async () => {
    const gate = gates.get('held.backoff')!;
    const events: TaskEvent[] = [];
    const sub = app.queue.events$.subscribe((e) => events.push(e));
    const backedOff = async (ids: string[]) => {
      const rows = await db.sql<{ n: number }>(
        `SELECT count(*)::int AS n FROM pgqueue.task WHERE id = ANY ($1::bigint[]) AND state = 'pending' AND attempt = 0 AND run_at > now() + interval '20 seconds'`,
        [ids],
      );
      return rows[0].n === ids.length;
    };
    try {
      const parent = await app.queue.enqueue('held.backoff', { gated: true });
      await gate.started.promise;
      const holder = (await holdTaskRow(prisma, app.queue, parent, HOLD_MS)).committed;
      const heldSince = Date.now();
      gate.open.resolve(); // the parent's handler meets its 429: its back-off meets the held row
      const others = await app.queue.enqueueMany(Array.from({ length: 6 }, () => ({ queue: 'held.backoff' as const, payload: {} })));
      await waitFor('the others backed off while the row is held', () => backedOff(others), { timeoutMs: HOLD_MS - 2000 });
      expect(Date.now() - heldSince).toBeLessThan(HOLD_MS);
      expect((await app.queue.get(parent))?.state).toBe('running');
      await holder;
      await waitFor("the parent's back-off written after the commit", () => backedOff([parent]), { timeoutMs: 10_000 });
      // Each outcome is published once its statement answered, which can be after the test saw the
      // row committed: wait for one per task, then demand they are the back-offs.
      const ours = [parent, ...others];
      const outcomes = () => events.filter((e) => e.type !== 'claimed' && ours.includes(e.taskId)).map((e) => [e.taskId, e.type]);
      await waitFor('an outcome published for each task', () => outcomes().length >= ours.length, { timeoutMs: 10_000 });
      expect(outcomes().sort()).toEqual(ours.map((id) => [id, 'backed-off']).sort());
    } finally {
      sub.unsubscribe();
    }
  }, 60_000);

  it("lease mode: the queue's other running tasks keep their leases while the row is held", async () => {
    const gate = gates.get('held.beat')!;
    const parent = await app.queue.enqueue('held.beat', { gated: true });
    await gate.started.promise;
    const others = await app.queue.enqueueMany(Array.from({ length: 3 }, () => ({ queue: 'held.beat' as const, payload: {} })));
    await waitFor('the others running', async () => {
      const [row] = await db.sql<{ n: number }>(`SELECT count(*)::int AS n FROM pgqueue.task WHERE id = ANY ($1::bigint[]) AND state = 'running'`, [others]);
      return row.n === 3;
    });
    const lost: string[] = [];
    const sub = app.queue.events$.subscribe((e) => {
      if (e.type === 'lease-lost') lost.push(e.taskId);
    });
    try {
      await prisma.$transaction(
        async (tx) => {
          await app.queue.enqueue('held.after', {}, { tx, dependsOn: [parent] });
          // Held past the others' end (4 s) and more than twice their lease.
          await waitFor('the others done while the row is held', async () => {
            const [row] = await db.sql<{ n: number }>(`SELECT count(*)::int AS n FROM pgqueue.task WHERE id = ANY ($1::bigint[]) AND state <> 'done'`, [others]);
            return row.n === 0;
          }, { timeoutMs: 15_000 });
        },
        { maxWait: 5000, timeout: 30_000 },
      );
      const runs = await db.sql<{ id: string; attempt: number }>(`SELECT id::text, attempt FROM pgqueue.task_archive WHERE id = ANY ($1::bigint[])`, [others]);
      expect(runs.map((r) => r.attempt)).toEqual([1, 1, 1]); // none was rescued and run again
      expect(lost.filter((id) => others.includes(id))).toEqual([]);
    } finally {
      sub.unsubscribe();
      gate.open.resolve();
    }
    await waitFor('the parent done', async () => (await app.queue.get(parent))?.state === 'done', { timeoutMs: 30_000 });
  }, 60_000);

  it("lease mode: progress and log writes wait for the row within their bound and keep what they carry", async () => {
    const id = await app.queue.enqueue('held.report', {});
    await reportStarted.promise;
    const holder = (await holdTaskRow(prisma, app.queue, id, HOLD_MS)).committed;
    const heldSince = Date.now();
    const longest = await longestLockWait((text) => db.sql(text), HOLD_MS - 1000 - (Date.now() - heldSince));
    await holder;
    await waitFor('the reporting task done', async () => (await app.queue.get(id))?.state === 'done', { timeoutMs: 30_000 });
    const logs = await app.queue.getLogs(id);
    expect(logs?.filter((e) => e.kind === 'log').map((e) => e.message)).toEqual(Array.from({ length: 20 }, (_, i) => `line ${i}`));
    expect((await app.queue.get(id))?.progress).toEqual({ done: 20, of: 20 });
    expect(longest).toBeGreaterThan(0); // a write did meet the held row
    expect(longest).toBeLessThan(3500); // its bound is 1 s; room for a loaded machine
  }, 60_000);
});
