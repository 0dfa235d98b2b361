/**
 * Durable workflows under SIGKILL (issue 24, proofs): worker processes (test/fixtures/workflow-worker.ts)
 * are killed at named pause points, then another process takes the workflow over once the lease
 * ran out (1 s lease, rescue every 250 ms).
 *
 * - wf.step is at least once with a stable key: killed after its function ran but before its
 *   journal entry, it runs again with the same stepKey, and the second run's result is the one
 *   every later attempt replays.
 * - wf.transaction is exactly once: killed inside the transaction (rolled back) or right after its
 *   commit (before the attempt goes on), its row exists once in the end.
 * - Signals sent before, during and after a wait, with kills between them: each consumed once, in order.
 */
import { killFixtureProcesses, startFixtureProcess, type FixtureProcess } from '../support/fixture-process';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';
import { createWorkflowLedger } from '../support/workflow-ledger';

const LEASE_MS = 1000;
const RESCUE_MS = 250;

describe('durable workflows: worker processes SIGKILLed at every point', () => {
  let db: TestDatabase;
  let api: QueueApp;
  let n = 0;

  const worker = (pause: string[] = []): FixtureProcess =>
    startFixtureProcess('workflow-worker', [JSON.stringify({ url: db.url, worker: `crash-${n++}`, leaseMs: LEASE_MS, rescueIntervalMs: RESCUE_MS, pause })]);

  const state = async (id: string) => (await api.queue.get(id))?.state;

  beforeAll(async () => {
    db = await createTestDatabase();
    api = await bootQueueApp(db.prisma(), [], { autoStart: false }); // installs the schema, enqueues, signals
    await createWorkflowLedger(db.sql);
  }, 60_000);

  afterAll(async () => {
    await killFixtureProcesses();
    await api?.close();
    await db?.drop();
  });

  it('a step killed after its call, before its journal entry, runs again with the same key; its second result is replayed', async () => {
    const id = await api.queue.enqueue('wfx.step', {});
    const first = worker(['call']);
    expect(await first.line('PAUSED')).toBe(`PAUSED call ${id}`);
    await first.kill();
    // The call ran (its row), but the journal has nothing: the entry was never written.
    expect(await db.sql('SELECT count(*)::int AS n FROM pgqueue.workflow_step WHERE task_id = $1', [id])).toEqual([{ n: 0 }]);

    const second = worker();
    await waitFor('the workflow parked on its signal', async () => (await api.queue.get(id))?.workflow?.waitingFor?.kind === 'signal', { timeoutMs: 30_000 });
    const calls = await db.sql<{ key: string; worker: string }>('SELECT key, worker FROM wf_call WHERE workflow = $1 ORDER BY worker', [id]);
    expect(calls).toEqual([
      { key: `${id}:call`, worker: 'crash-0' },
      { key: `${id}:call`, worker: 'crash-1' },
    ]);
    const [entry] = await db.sql('SELECT result, attempt FROM pgqueue.workflow_step WHERE task_id = $1 AND seq = 0', [id]);
    expect(entry.result.v).toMatchObject({ worker: 'crash-1', pid: second.child.pid });

    // A later attempt (woken by the signal) replays the second result and does not call again.
    await api.queue.signal(id, 'go', 'now');
    await waitFor('the workflow done', async () => (await state(id)) === 'done', { timeoutMs: 30_000 });
    expect((await api.queue.get(id))!.result).toEqual({ call: { worker: 'crash-1', pid: second.child.pid }, go: 'now' });
    expect(await db.sql('SELECT count(*)::int AS n FROM wf_call WHERE workflow = $1', [id])).toEqual([{ n: 2 }]);
    await second.kill();
  }, 90_000);

  it.each([
    ['in-tx', 'inside the transaction, before its commit'],
    ['after-tx', 'after the commit, before the attempt goes on'],
  ])("a transaction step killed %s (%s) leaves its rows exactly once", async (point) => {
    const id = await api.queue.enqueue('wfx.tx', {});
    const first = worker([point]);
    expect(await first.line('PAUSED')).toBe(`PAUSED ${point} ${id}`);
    await first.kill();
    const committed = await db.sql<{ n: number }>('SELECT count(*)::int AS n FROM wf_ledger WHERE workflow = $1', [id]);
    expect(committed).toEqual([{ n: point === 'in-tx' ? 0 : 1 }]);

    const second = worker();
    await waitFor('the workflow done', async () => (await state(id)) === 'done', { timeoutMs: 30_000 });
    expect(await db.sql('SELECT step, worker FROM wf_ledger WHERE workflow = $1', [id])).toEqual([
      { step: 'ledger', worker: point === 'in-tx' ? expect.stringMatching(/^crash-/) : 'crash-' + (n - 2) },
    ]);
    const [entry] = await db.sql('SELECT kind, outcome, attempt FROM pgqueue.workflow_step WHERE task_id = $1 AND seq = 0', [id]);
    expect(entry).toEqual({ kind: 'transaction', outcome: 'ok', attempt: point === 'in-tx' ? 2 : 1 });
    await second.kill();
  }, 90_000);

  it('signals sent before, during and after a wait, with kills between, are each consumed once and in order', async () => {
    const id = await api.queue.enqueue('wfx.signals', {});
    await api.queue.signal(id, 's', 1); // before: no attempt has run yet

    const first = worker(['after-a']);
    expect(await first.line('PAUSED')).toBe(`PAUSED after-a ${id}`);
    await first.kill();

    const second = worker(['after-b']);
    // The replay takes its first signal from the journal, not the buffer: it parks on the second wait.
    await waitFor('the workflow parked on its second wait', async () => (await api.queue.get(id))?.workflow?.steps.length === 3 && (await state(id)) === 'waiting', {
      timeoutMs: 30_000,
    });
    await api.queue.signal(id, 's', 2); // during: it is parked on it
    expect(await second.line('PAUSED')).toBe(`PAUSED after-b ${id}`);
    await api.queue.signal(id, 's', 3); // after the second wait, before the third
    await api.queue.signal(id, 's', 4); // one too many: stays buffered
    await second.kill();

    const third = worker();
    await waitFor('the workflow done', async () => (await state(id)) === 'done', { timeoutMs: 30_000 });
    expect((await api.queue.get(id))!.result).toEqual([1, 2, 3]);
    const signals = await db.sql('SELECT payload, consumed_seq FROM pgqueue.workflow_signal WHERE task_id = $1 ORDER BY id', [id]);
    expect(signals).toEqual([
      { payload: 1, consumed_seq: 0 },
      { payload: 2, consumed_seq: 2 },
      { payload: 3, consumed_seq: 4 },
      { payload: 4, consumed_seq: null },
    ]);
    await third.kill();
  }, 90_000);
});
