/**
 * Durable workflows (workflow/): a @Workflow method journals its calls; every run after the first
 * replays what finished. Three app instances share the queues, so parks, wake-ups, signals and
 * children cross instances.
 */
import { Injectable, type INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  ChildWorkflowError,
  PgQueueDashboardModule,
  PgQueueModule,
  SignalTargetError,
  TaskHandler,
  Workflow,
  type LeaseTaskContext,
  type Task,
  type WorkflowContext,
} from '@app/pg-queue';
import { drainQueue, pruneHistory, wakeWorkflows } from '@app/pg-queue/testing';
import type { PrismaClient } from '../../src/generated/prisma/client';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

/** Calls of each outside function, by workflow id and step: what a replay must not repeat. */
const calls = new Map<string, number>();
const called = (key: string) => calls.set(key, (calls.get(key) ?? 0) + 1);
/** Step keys each outside call saw. */
const keys = new Map<string, string[]>();
/** Makes the next run of `flow.order` fail once after its transaction (to force a replay). */
let failOnce = new Set<string>();
let mismatch = false;

@Injectable()
class Flows {
  @Workflow('flow.order', { maxAttempts: 5, backoff: { type: 'fixed', delayMs: 10 } })
  async order(input: { n: number }, wf: WorkflowContext<PrismaClient>) {
    const charge = await wf.step('charge', () => {
      called(`${wf.workflowId}:charge`);
      keys.set(wf.workflowId, [...(keys.get(wf.workflowId) ?? []), wf.stepKey('charge')]);
      return { chargeId: `ch-${input.n}`, at: new Date(0) };
    });
    // Changed code (`mismatch`): the journal's transaction "reserve" is now a step of that name.
    if (mismatch) await wf.step('reserve', () => 1);
    else await wf.transaction('reserve', (tx) => tx.$executeRawUnsafe('INSERT INTO wf_ledger (workflow, entry) VALUES ($1, $2)', wf.workflowId, 'reserve'));
    if (failOnce.delete(wf.workflowId)) throw new Error('fails once after its transaction');
    await wf.sleep(50);
    const delivered = await wf.waitForSignal<{ at: string }>('delivered', { timeoutMs: 60_000 });
    const id = await wf.enqueue('flow.email', { n: input.n });
    return { charge, delivered, emailTask: id };
  }

  @Workflow('flow.timeout')
  async timeout(_input: unknown, wf: WorkflowContext) {
    const got = await wf.waitForSignal('never', { timeoutMs: 200 });
    const twice = [await wf.waitForSignal('twice'), await wf.waitForSignal('twice')];
    return { got, twice };
  }

  @Workflow('flow.parent')
  async parent(input: { fail: boolean }, wf: WorkflowContext) {
    const doubled = await wf.child<number>('double', 'flow.child', { x: 21 });
    try {
      await wf.child('broken', 'flow.child', { x: input.fail ? -1 : 1 });
      return { doubled, compensated: false };
    } catch (err) {
      if (!(err instanceof ChildWorkflowError)) throw err;
      await wf.step('compensate', () => void called(`${wf.workflowId}:compensate`));
      return { doubled, compensated: true, state: err.state };
    }
  }

  @Workflow('flow.sleepy')
  async sleepy(_input: unknown, wf: WorkflowContext) {
    await wf.sleep(3_600_000);
    return (await wf.patched('v2')) ? 'new' : 'old';
  }

  /** Its code catches everything: the rule breaks below must end it dead all the same. */
  @Workflow('flow.catchall', { maxAttempts: 5, backoff: { type: 'fixed', delayMs: 10 } })
  async catchall(input: { rule: 'mismatch' | 'twice' | 'large' }, wf: WorkflowContext) {
    try {
      if (input.rule === 'twice') {
        await wf.step('same', () => 1);
        await wf.step('same', () => 2);
      }
      if (input.rule === 'large') await wf.step('big', () => 'x'.repeat(2_000_000));
      if (input.rule === 'mismatch') {
        if (mismatch) await wf.transaction('first', async () => 1); // changed code: the journal's step "first" is now a transaction
        else await wf.step('first', () => 1);
        await wf.waitForSignal('go');
      }
      return 'went on';
    } catch {
      return 'compensated';
    }
  }

  @TaskHandler('flow.child', { mode: 'lease', maxAttempts: 1 })
  async child(task: Task<{ x: number }>, _ctx: LeaseTaskContext) {
    if (task.payload.x < 0) throw new Error('negative');
    return task.payload.x * 2;
  }

  @TaskHandler('flow.email', { mode: 'lease' })
  async email(_task: Task, _ctx: LeaseTaskContext) {}
}

describe('durable workflows', () => {
  let db: TestDatabase;
  const apps: QueueApp[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    await db.sql('CREATE TABLE wf_ledger (workflow text NOT NULL, entry text NOT NULL)');
    for (let i = 0; i < 3; i++) apps.push(await bootQueueApp(db.prisma(12), [Flows], { workerId: `wf-${i}`, databaseUrl: db.url }));
  }, 60_000);

  afterAll(async () => {
    for (const a of apps) await a.close();
    await db.drop();
  });

  const queue = () => apps[0].queue;

  it('replays done steps after a failure, parks on a sleep and a signal, and returns', async () => {
    const ids = await Promise.all([1, 2, 3, 4].map((n) => queue().enqueue('flow.order', { n })));
    failOnce = new Set(ids.slice(0, 2));
    await waitFor('every workflow parked on its signal', async () => {
      for (const id of ids) if ((await queue().get(id))?.workflow?.waitingFor?.kind !== 'signal') return false;
      return true;
    });
    const parked = await queue().get(ids[0]);
    expect(parked).toMatchObject({ state: 'waiting', workflow: { waitingFor: { kind: 'signal', name: 'delivered' } } });
    expect(parked!.workflow!.steps.map((s) => [s.kind, s.name, s.outcome])).toEqual([
      ['step', 'charge', 'ok'],
      ['transaction', 'reserve', 'ok'],
      ['sleep', 'sleep', 'ok'],
      ['signal', 'delivered', 'waiting'],
    ]);
    for (const id of ids) await queue().signal(id, 'delivered', { at: `t-${id}` });
    await waitFor('condition', async () => (await Promise.all(ids.map((id) => queue().get(id)))).every((t) => t?.state === 'done'));
    for (const id of ids) {
      const t = await queue().get(id);
      expect(t!.result).toMatchObject({ charge: { chargeId: expect.any(String), at: '1970-01-01T00:00:00.000Z' }, delivered: { at: `t-${id}` } });
      expect(calls.get(`${id}:charge`)).toBe(1);
      expect(keys.get(id)).toEqual([`${id}:charge`]);
    }
    const ledger = await db.sql<{ workflow: string; n: number }>('SELECT workflow, count(*)::int AS n FROM wf_ledger GROUP BY workflow');
    expect(ledger.sort((a, b) => a.workflow.localeCompare(b.workflow))).toEqual(ids.map((id) => ({ workflow: id, n: 1 })).sort((a, b) => a.workflow.localeCompare(b.workflow)));
    const emails = await db.sql<{ n: number }>(`SELECT count(*)::int AS n FROM (SELECT id FROM pgqueue.task WHERE queue = 'flow.email' UNION ALL SELECT id FROM pgqueue.task_archive WHERE queue = 'flow.email') e`);
    expect(emails[0].n).toBe(4);
  }, 60_000);

  it('keeps signals sent before the wait, in order, each once; a wait times out with null', async () => {
    const id = await queue().enqueue('flow.timeout', {});
    await queue().signal(id, 'twice', 1);
    await queue().signal(id, 'twice', 2);
    await queue().signal(id, 'twice', 3);
    await waitFor('condition', async () => (await queue().get(id))?.state === 'done');
    expect((await queue().get(id))!.result).toEqual({ got: null, twice: [1, 2] });
    await expect(queue().signal(id, 'twice', 4)).rejects.toThrow(SignalTargetError);
    await expect(queue().signal('999999999', 'x')).rejects.toThrow(/no such task/);
  }, 30_000);

  it('runs children and hands a dead child to the parent as ChildWorkflowError', async () => {
    const ok = await queue().enqueue('flow.parent', { fail: false });
    const failing = await queue().enqueue('flow.parent', { fail: true });
    await waitFor('both parents done', async () => (await queue().get(failing))?.state === 'done' && (await queue().get(ok))?.state === 'done', { timeoutMs: 15_000 }).catch(async (err) => {
      console.log(JSON.stringify(await db.sql('SELECT id, queue, state, attempt, waiting_for, woken, dependants, last_error FROM pgqueue.task')));
      console.log(JSON.stringify(await db.sql('SELECT * FROM pgqueue.workflow_step WHERE task_id IN ($1, $2)', [ok, failing])));
      console.log(JSON.stringify(await db.sql('SELECT * FROM pgqueue.task_dependency_debt')));
      throw err;
    });
    expect((await queue().get(ok))!.result).toEqual({ doubled: 42, compensated: false });
    expect((await queue().get(failing))!.result).toEqual({ doubled: 42, compensated: true, state: 'dead' });
    expect(calls.get(`${failing}:compensate`)).toBe(1);
  }, 30_000);

  it('fails the workflow as dead when the code no longer matches its journal', async () => {
    const id = await queue().enqueue('flow.order', { n: 9 });
    await waitFor('condition', async () => (await queue().get(id))?.workflow?.waitingFor?.kind === 'signal');
    mismatch = true;
    try {
      await queue().signal(id, 'delivered', { at: 'x' });
      await waitFor('condition', async () => (await queue().get(id))?.state === 'dead');
    } finally {
      mismatch = false;
    }
    expect((await queue().get(id))!.lastError).toMatch(/WorkflowReplayError.*at call 2 the journal has transaction "reserve", the code called step "reserve"/s);
    // Fixed code: retry replays it from its journal.
    expect(await queue().retry(id)).toBe(true);
    await waitFor('condition', async () => (await queue().get(id))?.workflow?.waitingFor?.kind === 'signal' || (await queue().get(id))?.state === 'done');
    expect(calls.get(`${id}:charge`)).toBe(1);
  }, 40_000);

  it('cancels a parked workflow at once; wakeWorkflows ends a long sleep now', async () => {
    const a = await queue().enqueue('flow.sleepy', {});
    const b = await queue().enqueue('flow.sleepy', {});
    await waitFor('condition', async () => (await queue().get(a))?.state === 'waiting' && (await queue().get(b))?.state === 'waiting');
    expect((await queue().get(a))!.workflow!.waitingFor).toMatchObject({ kind: 'sleep', until: expect.any(Date) });
    expect(await queue().cancel(a)).toBe('cancelled');
    expect(await wakeWorkflows(apps[0].app)).toBeGreaterThanOrEqual(1);
    await drainQueue(apps[0].app, 'flow.sleepy');
    await waitFor('condition', async () => (await queue().get(b))?.state === 'done');
    expect((await queue().get(b))!.result).toBe('new');
    expect((await queue().get(a))!.state).toBe('cancelled');
  }, 40_000);

  it('retention deletes the journals and signals of workflows that ended, not of parked ones', async () => {
    const ended = await queue().enqueue('flow.timeout', {});
    await queue().signal(ended, 'twice', 1);
    await queue().signal(ended, 'twice', 2);
    await queue().signal(ended, 'twice', 3); // never consumed
    const parked = await queue().enqueue('flow.sleepy', {});
    await waitFor('one ended, one parked', async () => (await queue().get(ended))?.state === 'done' && (await queue().get(parked))?.state === 'waiting');
    const count = async (table: string, id: string) => (await db.sql<{ n: number }>(`SELECT count(*)::int AS n FROM pgqueue.${table} WHERE task_id = $1`, [id]))[0].n;
    expect([await count('workflow_step', ended), await count('workflow_signal', ended), await count('workflow_step', parked)]).toEqual([3, 3, 1]);
    await db.sql(`UPDATE pgqueue.workflow_step SET finished_at = now() - interval '30 days' WHERE task_id IN ($1, $2)`, [ended, parked]);
    await db.sql(`UPDATE pgqueue.workflow_signal SET created_at = now() - interval '30 days' WHERE task_id = $1`, [ended]);
    await pruneHistory(apps[0].app);
    expect([await count('workflow_step', ended), await count('workflow_signal', ended), await count('workflow_step', parked)]).toEqual([0, 0, 1]);
    expect(await queue().cancel(parked)).toBe('cancelled');
  }, 30_000);

  it('the dashboard shows a workflow\'s journal and what it waits for', async () => {
    const id = await queue().enqueue('flow.sleepy', {});
    await waitFor('parked', async () => (await queue().get(id))?.state === 'waiting');
    const moduleRef = await Test.createTestingModule({
      imports: [PgQueueModule.forRoot({ prisma: db.prisma(2), autoStart: false }), PgQueueDashboardModule.forRoot({ path: '/q', guard: 'none', readOnly: true })],
    }).compile();
    const http: INestApplication = moduleRef.createNestApplication({ logger: ['error'] });
    try {
      await http.listen(0, '127.0.0.1');
      const page = await (await fetch(`${(await http.getUrl()).replace('[::1]', '127.0.0.1')}/q/tasks/${id}`)).text();
      expect(page).toContain('Workflow journal');
      expect(page).toMatch(/Waiting for sleep until/);
      expect(page).toMatch(/<td>1<\/td><td>sleep<\/td><td>sleep<\/td>/);
    } finally {
      await http.close();
      await queue().cancel(id);
    }
  }, 30_000);

  it('a catch-all cannot hide a replay mismatch, a repeated step name or a result too large: the workflow ends dead at once', async () => {
    const twice = await queue().enqueue('flow.catchall', { rule: 'twice' });
    const large = await queue().enqueue('flow.catchall', { rule: 'large' });
    const renamed = await queue().enqueue('flow.catchall', { rule: 'mismatch' });
    await waitFor('the mismatch one parked', async () => (await queue().get(renamed))?.state === 'waiting');
    mismatch = true;
    try {
      await queue().signal(renamed, 'go');
      await waitFor('all three dead', async () => {
        const states = await Promise.all([twice, large, renamed].map(async (id) => (await queue().get(id))?.state));
        return states.every((s) => s === 'dead');
      });
    } finally {
      mismatch = false;
    }
    const [t, l, r] = await Promise.all([twice, large, renamed].map((id) => queue().get(id)));
    expect(t).toMatchObject({ attempt: 1, lastError: expect.stringMatching(/^WorkflowDefinitionError: .*named "same" twice/) });
    expect(l).toMatchObject({ attempt: 1, lastError: expect.stringMatching(/^NonRetryableError: .*the result of "big" cannot be journaled: .*over the 262144-byte limit/) });
    expect(r!.lastError).toMatch(/^WorkflowReplayError: .*at call 1 the journal has step "first", the code called transaction "first"/);
  }, 30_000);
});
