/**
 * A workflow whose task row a business transaction holds (issue 24; the bounded-locks rule): a
 * transaction that enqueues a task depending on a running workflow (`dependsOn` inside `{ tx }`)
 * locks the workflow's row until it commits (FOR NO KEY UPDATE: the link is ordered against the
 * workflow's end, see dependencies.sql.ts). The workflow's journal writes must not wait for it:
 * its steps go on while that transaction is open, each run once; its end waits for the commit,
 * as any task's does. A park (a sleep) waits for the row too, but no statement waits longer than
 * its bound: the park is tried again until the row is free.
 */
import { Injectable } from '@nestjs/common';
import { TaskHandler, Workflow, type WorkflowContext } from '@app/pg-queue';
import { bootQueueApp, deferred, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { holdTaskRow, longestLockWait } from '../support/held-task-row';
import { waitFor } from '../support/wait-for';

const gate = deferred();
const keys: string[] = [];
const sleeperGate = deferred();
const sleeperAt = deferred();

@Injectable()
class HeldWorkflows {
  @Workflow('held.wf', { maxAttempts: 50, backoff: { type: 'fixed', delayMs: 100 } })
  async run(_input: unknown, wf: WorkflowContext) {
    const a = await wf.step('a', async () => {
      keys.push(wf.stepKey('a'));
      await gate.promise;
      return 1;
    });
    const b = await wf.step('b', () => 2);
    return a + b;
  }

  @Workflow('held.sleeper', { maxAttempts: 50 })
  async sleeper(_input: unknown, wf: WorkflowContext) {
    await wf.step('a', async () => {
      sleeperAt.resolve();
      await sleeperGate.promise;
    });
    await wf.sleep(200);
    return wf.step('b', () => 'woke');
  }

  @TaskHandler('held.after')
  async after() {}
}

/** How long a holder keeps the workflow's row. */
const HOLD_MS = 8000;

describe('a workflow whose row a business transaction holds', () => {
  let db: TestDatabase;
  let app: QueueApp;
  let prisma: ReturnType<TestDatabase['prisma']>;

  beforeAll(async () => {
    db = await createTestDatabase();
    prisma = db.prisma(6);
    app = await bootQueueApp(prisma, [HeldWorkflows], { workerId: 'held-0', databaseUrl: db.url });
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    await db?.drop();
  });

  it('its steps go on, each once, while the transaction is open; it finishes once that commits', async () => {
    const id = await app.queue.enqueue('held.wf', {});
    await waitFor('step a under way', async () => keys.length === 1);

    // A business transaction that enqueues a task depending on the workflow holds its row.
    const holder = (await holdTaskRow(prisma, app.queue, id, HOLD_MS)).committed;
    const heldSince = Date.now();
    gate.resolve(); // step a returns: its journal write now meets the held row

    // While the row is held: step a's and step b's entries are journaled, no journal write waits.
    await waitFor('steps a and b journaled while the row is held', async () => {
      const [row] = await db.sql<{ n: number }>(`SELECT count(*)::int AS n FROM pgqueue.workflow_step WHERE task_id = $1`, [id]);
      return row.n === 2;
    }, { timeoutMs: HOLD_MS - 2000 });
    const [waits] = await db.sql<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%workflow_step%' AND pid <> pg_backend_pid()`,
    );
    expect(waits.n).toBe(0);
    expect(Date.now() - heldSince).toBeLessThan(HOLD_MS); // still held: the holder has not committed
    expect((await app.queue.get(id))?.state).toBe('running'); // its end waits for the commit

    await holder;
    await waitFor('workflow done', async () => (await app.queue.get(id))?.state === 'done', { timeoutMs: 30_000 });
    expect((await app.queue.get(id))?.result).toBe(3);
    expect(keys).toEqual([`${id}:a`]); // step a ran once
  }, 60_000);

  it('a park waits for the row within its bound, again and again, and parks once the row is free', async () => {
    const id = await app.queue.enqueue('held.sleeper', {});
    await sleeperAt.promise;
    const holder = (await holdTaskRow(prisma, app.queue, id, HOLD_MS)).committed;
    const heldSince = Date.now();
    sleeperGate.resolve(); // step a is journaled (no wait), then the sleep's park meets the held row

    const longest = await longestLockWait((text) => db.sql(text), HOLD_MS - 1000 - (Date.now() - heldSince));
    await holder;
    await waitFor('the sleeper done', async () => (await app.queue.get(id))?.state === 'done', { timeoutMs: 30_000 });
    expect((await app.queue.get(id))?.result).toBe('woke');
    expect(longest).toBeGreaterThan(0); // the park did meet the held row
    expect(longest).toBeLessThan(3500); // its bound is 1 s (ROW_LOCK_WAIT_MS); room for a loaded machine
  }, 60_000);
});
