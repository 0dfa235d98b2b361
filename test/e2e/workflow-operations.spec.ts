/**
 * What a task has applies to workflows (issue 24, proofs), three app instances in this process:
 * flow control (globalConcurrency, partitionConcurrency) holds across workflow attempts and parks;
 * cancel of a running workflow fires its wf.signal and ends it cancelled; retry of a dead workflow
 * replays it, skipping its done steps.
 */
import { Injectable } from '@nestjs/common';
import { Workflow, type WorkflowContext } from '@app/pg-queue';
import { bootQueueApp, deferred, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { pause, waitFor } from '../support/wait-for';

/** Steps running now and the most seen at once, by key ('global', or a partition). */
const running = new Map<string, number>();
const most = new Map<string, number>();
async function occupy(key: string, ms: number): Promise<void> {
  running.set(key, (running.get(key) ?? 0) + 1);
  most.set(key, Math.max(most.get(key) ?? 0, running.get(key)!));
  try {
    await pause(ms);
  } finally {
    running.set(key, running.get(key)! - 1);
  }
}

const calls = new Map<string, number>();
const called = (key: string): void => void calls.set(key, (calls.get(key) ?? 0) + 1);
let broken = true;
const hanging = deferred();
let abortedWith: unknown = null;

@Injectable()
class Operated {
  @Workflow('ops.global', { globalConcurrency: 2 })
  async global(_input: unknown, wf: WorkflowContext) {
    await wf.step('one', () => occupy('global', 150));
    await wf.sleep(20);
    await wf.step('two', () => occupy('global', 150));
  }

  @Workflow('ops.partitioned', { partitionConcurrency: 1 })
  async partitioned(input: { p: string }, wf: WorkflowContext) {
    await wf.step('one', () => occupy(input.p, 100));
    await wf.sleep(20);
    await wf.step('two', () => occupy(input.p, 100));
  }

  @Workflow('ops.hang')
  async hang(_input: unknown, wf: WorkflowContext) {
    await wf.step('done-first', () => called(`${wf.workflowId}:done-first`));
    await wf.step('hang', () =>
      new Promise((_, reject) => {
        wf.signal.addEventListener('abort', () => {
          abortedWith = wf.signal.reason;
          reject(wf.signal.reason);
        }, { once: true });
        hanging.resolve();
      }),
    );
  }

  @Workflow('ops.retry', { maxAttempts: 1 })
  async retry(_input: unknown, wf: WorkflowContext) {
    const a = await wf.step('a', () => (called(`${wf.workflowId}:a`), 'a'));
    await wf.transaction('t', () => Promise.resolve(called(`${wf.workflowId}:t`)));
    const b = await wf.step('b', () => {
      called(`${wf.workflowId}:b`);
      if (broken) throw new Error('b is broken');
      return 'b';
    });
    return [a, b];
  }
}

describe('workflows under flow control, cancel and retry', () => {
  let db: TestDatabase;
  const apps: QueueApp[] = [];
  const queue = () => apps[0].queue;
  const states = async (ids: string[]) => (await Promise.all(ids.map((id) => queue().get(id)))).map((t) => t?.state);

  beforeAll(async () => {
    db = await createTestDatabase();
    for (let i = 0; i < 3; i++) apps.push(await bootQueueApp(db.prisma(12), [Operated], { workerId: `ops-${i}`, databaseUrl: db.url }));
  }, 60_000);

  afterAll(async () => {
    for (const a of apps) await a.close();
    await db.drop();
  });

  it('globalConcurrency holds across 3 instances for workflow attempts (a park frees the slot)', async () => {
    const ids = await queue().enqueueMany(Array.from({ length: 10 }, () => ({ queue: 'ops.global' as const, payload: {} })));
    await waitFor('every workflow done', async () => (await states(ids)).every((s) => s === 'done'), { timeoutMs: 60_000 });
    expect(most.get('global')).toBe(2);
  }, 90_000);

  it('partitionConcurrency holds per partition for workflow attempts', async () => {
    const items = ['a', 'b', 'c'].flatMap((p) => Array.from({ length: 4 }, () => ({ queue: 'ops.partitioned' as const, payload: { p }, options: { partition: p } })));
    const ids = await queue().enqueueMany(items);
    await waitFor('every workflow done', async () => (await states(ids)).every((s) => s === 'done'), { timeoutMs: 60_000 });
    expect([most.get('a'), most.get('b'), most.get('c')]).toEqual([1, 1, 1]);
  }, 90_000);

  it('cancel of a running workflow fires wf.signal and ends it cancelled', async () => {
    const id = await queue().enqueue('ops.hang', {});
    await hanging.promise;
    expect((await queue().get(id))!.state).toBe('running');
    expect(await queue().cancel(id)).toBe('requested');
    await waitFor('the workflow cancelled', async () => (await queue().get(id))?.state === 'cancelled', { timeoutMs: 10_000 }); // the lease runs 60 s: not by expiry
    expect(abortedWith).not.toBeNull();
    expect(calls.get(`${id}:done-first`)).toBe(1);
  }, 30_000);

  it('retry of a dead workflow replays it, skipping its done steps', async () => {
    const id = await queue().enqueue('ops.retry', {});
    await waitFor('the workflow dead', async () => (await queue().get(id))?.state === 'dead', { timeoutMs: 20_000 });
    expect((await queue().get(id))!.lastError).toMatch(/b is broken/);
    broken = false;
    expect(await queue().retry(id)).toBe(true);
    await waitFor('the workflow done', async () => (await queue().get(id))?.state === 'done', { timeoutMs: 20_000 });
    expect((await queue().get(id))!.result).toEqual(['a', 'b']);
    expect([calls.get(`${id}:a`), calls.get(`${id}:t`), calls.get(`${id}:b`)]).toEqual([1, 1, 2]);
    // chain() shows the journal as get() does: each call, its outcome and attempt.
    const [stage] = await queue().chain(id);
    expect(stage.workflow?.steps.map((s) => [s.name, s.outcome, s.attempt])).toEqual([['a', 'ok', 1], ['t', 'ok', 1], ['b', 'ok', 1]]); // b's attempt of the retried run (retry resets attempts)
    expect(stage.workflow).toEqual((await queue().get(id))!.workflow);
  }, 30_000);
});
