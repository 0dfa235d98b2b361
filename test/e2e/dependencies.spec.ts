/**
 * Fan-in dependencies (dependencies.sql.ts): a task enqueued with dependsOn runs only once every
 * parent is done, reads their results, and is cancelled when a parent ends dead or cancelled.
 * Three app instances run the parents while the dependants are enqueued, so dependants' inserts
 * race their parents' completions.
 */
import { Injectable } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import {
  DependenciesNotDoneError,
  DependencyNotFoundError,
  InvalidEnqueueOptionsError,
  NonRetryableError,
  TaskHandler,
  WorkerOrchestrator,
  type LeaseTaskContext,
  type Task,
  type TaskContext,
} from '@app/pg-queue';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import { PrismaClient } from '../../src/generated/prisma/client';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { StallProxy } from '../support/stall-proxy';
import { taskRow } from '../support/task-rows';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

interface Run {
  id: string;
  queue: string;
  start: number;
  end: number;
  results?: Record<string, unknown>;
}

const runs: Run[] = [];
const now = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface SplitPayload {
  parts: number;
  also?: string;
  failFirst?: boolean;
}

const splitErrors: string[] = [];

/** While true, `dep.flaky` dies (NonRetryableError); a retry after it is set false ends done. */
let flakyDies = true;

async function fanOut(task: Task<SplitPayload>, ctx: LeaseTaskContext | TaskContext) {
  const parts = [];
  for (let i = 0; i < task.payload.parts; i++) parts.push(await ctx.enqueue('dep.part', { n: i, ms: (i * 7) % 20 }));
  await ctx.enqueue('dep.join', { from: task.id }, { dependsOn: task.payload.also ? [...parts, task.payload.also] : parts });
  if (task.payload.failFirst && task.attempt === 1) throw new Error('fails after enqueuing: none of this attempt\'s follow-ups may stay');
}

@Injectable()
class GraphHandlers {
  @TaskHandler('dep.part', { mode: 'lease', concurrency: 4 })
  async part(task: Task<{ n: number; ms?: number; fail?: boolean }>, _ctx: LeaseTaskContext) {
    const run: Run = { id: task.id, queue: task.queue, start: now(), end: Number.NaN };
    runs.push(run);
    await sleep(task.payload.ms ?? 5);
    run.end = now();
    if (task.payload.fail) throw new NonRetryableError('part failed for good');
    return { n: task.payload.n, square: task.payload.n * task.payload.n };
  }

  @TaskHandler('dep.part.tx', { concurrency: 2 })
  async partTx(task: Task<{ n: number }>, ctx: TaskContext) {
    const run: Run = { id: task.id, queue: task.queue, start: now(), end: Number.NaN };
    runs.push(run);
    await ctx.tx.$executeRawUnsafe('SELECT 1');
    run.end = now();
    return task.payload.n;
  }

  @TaskHandler('dep.flaky', { mode: 'lease' })
  async flaky(task: Task<unknown>) {
    runs.push({ id: task.id, queue: task.queue, start: now(), end: now() });
    if (flakyDies) throw new NonRetryableError('flaky parent died');
    return 'flaky done';
  }

  @TaskHandler('dep.join', { concurrency: 4 })
  async join(task: Task<unknown>, ctx: TaskContext) {
    const run: Run = { id: task.id, queue: task.queue, start: now(), end: Number.NaN, results: await ctx.parentResults() };
    runs.push(run);
    run.end = now();
    return Object.keys(run.results!).length;
  }

  /** dep.join in lease mode, wider: for the 2 000-join fan-out. */
  @TaskHandler('dep.join.wide', { mode: 'lease', concurrency: 16 })
  async joinWide(task: Task<unknown>, ctx: LeaseTaskContext) {
    const run: Run = { id: task.id, queue: task.queue, start: now(), end: Number.NaN, results: await ctx.parentResults() };
    runs.push(run);
    run.end = now();
    return Object.keys(run.results!).length;
  }

  /** Fans out into parts and a join of them, from the handler (ctx.enqueue), then maybe fails. */
  @TaskHandler('dep.split', { mode: 'lease', backoff: { type: 'fixed', delayMs: 10 } })
  split(task: Task<SplitPayload>, ctx: LeaseTaskContext) {
    return fanOut(task, ctx);
  }

  @TaskHandler('dep.split.tx', { backoff: { type: 'fixed', delayMs: 10 } })
  splitTx(task: Task<SplitPayload>, ctx: TaskContext) {
    return fanOut(task, ctx);
  }

  @TaskHandler('dep.split.bad', { mode: 'lease' })
  async splitBad(task: Task<unknown>, ctx: LeaseTaskContext) {
    const first = await ctx.enqueue('dep.part', { n: 1 });
    const attempts: unknown[] = [[{ item: 1 }], [{ item: -1 }], ['999999999'], [task.id], []];
    for (const dependsOn of attempts) {
      const err = await ctx.enqueue('dep.join', {}, { dependsOn: dependsOn as never }).catch((e: unknown) => e);
      splitErrors.push(err instanceof DependencyNotFoundError ? 'not-found' : err instanceof InvalidEnqueueOptionsError ? 'invalid' : String(err));
    }
    return first.item;
  }

  @TaskHandler('dep.bad.result', { mode: 'lease' })
  async badResult() {
    return { big: 1n };
  }
}

describe('fan-in dependencies', () => {
  let db: TestDatabase;
  const instances: QueueApp[] = [];
  const queue = () => instances[0].queue;
  const byId = (id: string) => runs.filter((r) => r.id === id);
  const stateOf = async (id: string) => (await queue().get(id))?.state;

  beforeAll(async () => {
    db = await createTestDatabase();
    for (const name of ['g1', 'g2', 'g3']) {
      instances.push(await bootQueueApp(db.prisma(6), [GraphHandlers], { databaseUrl: db.url, workerId: name, pollIntervalMs: 5000 }));
    }
  });
  afterAll(async () => {
    for (const qa of instances) await qa.close();
    await db.drop();
  });

  it('40 joins over 5 parents each, enqueued while three instances run the parents: each join runs once, after all its parents, with their results', async () => {
    const joins: { id: string; parents: string[] }[] = [];
    for (let j = 0; j < 40; j++) {
      const parents = await queue().enqueueMany(
        Array.from({ length: 5 }, (_, i) => (i % 2 === 0
          ? { queue: 'dep.part', payload: { n: j * 10 + i, ms: (i * 7) % 20 } }
          : { queue: 'dep.part.tx', payload: { n: j * 10 + i } })),
      );
      // Enqueued from every instance while the parents are being claimed and completed.
      joins.push({ id: await instances[j % 3].queue.enqueue('dep.join', { j }, { dependsOn: parents }), parents });
    }
    await waitFor('every join ran', async () => joins.every((j) => byId(j.id).length > 0 && Number.isFinite(byId(j.id)[0].end)), {
      timeoutMs: 60_000,
      everyMs: 50,
    });
    for (const j of joins) {
      const [run, ...again] = byId(j.id);
      const parentEnds = j.parents.map((p) => byId(p)[0]?.end);
      expect({ join: j.id, again: again.length, afterParents: parentEnds.every((end) => end <= run.start) }).toEqual({ join: j.id, again: 0, afterParents: true });
      expect(Object.keys(run.results!).sort()).toEqual([...j.parents].sort());
    }
    const sample = byId(joins[3].id)[0].results!;
    expect(sample[joins[3].parents[0]]).toEqual({ n: 30, square: 900 });
    expect(sample[joins[3].parents[1]]).toBe(31);
    const info = await queue().get(joins[3].id);
    expect(info).toMatchObject({ state: 'done', dependsOn: [...joins[3].parents].sort((a, b) => Number(a) - Number(b)), result: 5 });
  });

  it('enqueueMany references items of the same call: a diamond runs in order, and chain() shows the graph', async () => {
    const [a, b, c, d] = await queue().enqueueMany([
      { queue: 'dep.part', payload: { n: 1, ms: 30 } },
      { queue: 'dep.part', payload: { n: 2 }, options: { dependsOn: [{ item: 0 }] } },
      { queue: 'dep.part', payload: { n: 3 }, options: { dependsOn: [{ item: 0 }] } },
      { queue: 'dep.join', payload: {}, options: { dependsOn: [{ item: 1 }, { item: 2 }] } },
    ]);
    expect(await stateOf(d)).toBe('waiting');
    expect(await queue().get(d)).toMatchObject({ dependenciesLeft: 2 });
    await waitFor('the diamond ran', async () => (await stateOf(d)) === 'done', { timeoutMs: 20_000, everyMs: 20 });
    expect(byId(b)[0].start).toBeGreaterThanOrEqual(byId(a)[0].end);
    expect(byId(c)[0].start).toBeGreaterThanOrEqual(byId(a)[0].end);
    expect(byId(d)[0].start).toBeGreaterThanOrEqual(Math.max(byId(b)[0].end, byId(c)[0].end));
    const graph = await queue().chain(d);
    expect(graph.map((s) => [s.stage, s.id])).toEqual([[0, a], [1, b], [1, c], [2, d]]);
    expect(graph[3].dependsOn).toEqual([b, c]);
  });

  it('a parent that ends dead cancels its dependants and theirs; so does cancelling a waiting parent', async () => {
    const [bad, child, grandchild] = await queue().enqueueMany([
      { queue: 'dep.part', payload: { n: 0, ms: 50, fail: true } },
      { queue: 'dep.join', payload: {}, options: { dependsOn: [{ item: 0 }] } },
      { queue: 'dep.join', payload: {}, options: { dependsOn: [{ item: 1 }] } },
    ]);
    await waitFor('the dependants were cancelled', async () => (await stateOf(grandchild)) === 'cancelled', { timeoutMs: 20_000, everyMs: 20 });
    expect(await stateOf(bad)).toBe('dead');
    expect(await queue().get(child)).toMatchObject({ state: 'cancelled', lastError: `task ${bad}, which it depends on, ended dead` });
    expect(byId(child).length + byId(grandchild).length).toBe(0);

    // A dependant enqueued after its parent died is cancelled at once.
    const late = await queue().enqueue('dep.join', {}, { dependsOn: [bad] });
    expect(await stateOf(late)).toBe('cancelled');

    // Cancelling a waiting task cancels what waits for it.
    const slow = await queue().enqueue('dep.part', { n: 9 }, { delayMs: 60_000 });
    const [mid, leaf] = await queue().enqueueMany([
      { queue: 'dep.join', payload: {}, options: { dependsOn: [slow] } },
      { queue: 'dep.join', payload: {}, options: { dependsOn: [{ item: 0 }] } },
    ]);
    expect(await queue().cancel(mid)).toBe('cancelled');
    await waitFor('the leaf was cancelled', async () => (await stateOf(leaf)) === 'cancelled', { timeoutMs: 20_000, everyMs: 20 });
    expect(await stateOf(slow)).toBe('pending');
    await queue().cancel(slow);
  });

  it('retryDead revives the dead parent, never the join it cancelled; retry(join) is refused: the join lacks that parent\'s result', async () => {
    const [parent, sibling, join] = await queue().enqueueMany([
      { queue: 'dep.flaky', payload: {} },
      { queue: 'dep.part', payload: { n: 5 } },
      { queue: 'dep.join', payload: {}, options: { dependsOn: [{ item: 0 }, { item: 1 }] } },
    ]);
    await waitFor('the parent died and the join was cancelled', async () => (await stateOf(join)) === 'cancelled' && (await stateOf(sibling)) === 'done', {
      timeoutMs: 20_000,
      everyMs: 20,
    });
    expect(await stateOf(parent)).toBe('dead');

    // retryDead retries dead tasks only: no join of this file ever dies, so none comes back.
    expect(await queue().retryDead({ queue: 'dep.join' })).toEqual([]);
    expect(await stateOf(join)).toBe('cancelled');
    flakyDies = false;
    expect(await queue().retryDead({ queue: 'dep.flaky' })).toEqual([parent]);
    await waitFor('the retried parent is done', async () => (await stateOf(parent)) === 'done', { timeoutMs: 20_000, everyMs: 20 });

    // Its parents are all done now, but the join never received the retried parent's result.
    const refused = await queue().retry(join).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(DependenciesNotDoneError);
    expect(refused).toMatchObject({ taskId: join, parents: expect.arrayContaining([parent]) });
    // The sibling too, when it finished after the join was cancelled.
    expect([[parent], [parent, sibling].sort((a, b) => Number(a) - Number(b))]).toContainEqual((refused as DependenciesNotDoneError).parents);
    await sleep(300); // settling and a worker's claim, had the join become pending
    expect(await queue().get(join)).toMatchObject({ state: 'cancelled', lastError: `task ${parent}, which it depends on, ended dead` });
    expect(byId(join)).toHaveLength(0);

    // The way back: a new join over the same parents, which reads both results from the archive.
    const again = await queue().enqueue('dep.join', {}, { dependsOn: [parent, sibling] });
    await waitFor('the new join ran', async () => (await stateOf(again)) === 'done', { timeoutMs: 20_000, everyMs: 20 });
    expect(byId(again)[0].results).toEqual({ [parent]: 'flaky done', [sibling]: { n: 5, square: 25 } });
  });

  it('a parent already done gives its result at once; a dependant of done parents is pending at once', async () => {
    const parent = await queue().enqueue('dep.part', { n: 7 });
    await waitFor('the parent is done', async () => (await stateOf(parent)) === 'done', { timeoutMs: 20_000, everyMs: 20 });
    const join = await queue().enqueue('dep.join', {}, { dependsOn: [parent] });
    await waitFor('the join ran', async () => byId(join).length === 1 && (await stateOf(join)) === 'done', { timeoutMs: 20_000, everyMs: 20 });
    expect(byId(join)[0].results).toEqual({ [parent]: { n: 7, square: 49 } });
  });

  it('a parent whose worker died: its lease is rescued, it runs again, and then its dependant', async () => {
    const orchestrators = instances.map((qa) => qa.app.get(WorkerOrchestrator));
    // A worker that claimed the parent and vanished: the lease is taken by hand and never completed.
    const parent = await queue().enqueue('dep.part.crash', { n: 1 });
    const join = await queue().enqueue('dep.join', {}, { dependsOn: [parent] });
    await db.sql(
      `UPDATE pgqueue.task SET state = 'running', attempt = 1, locked_by = 'gone', lease_token = gen_random_uuid(),
              locked_until = now() - interval '1 second', queue = 'dep.part' WHERE id = $1`,
      [parent],
    );
    await orchestrators[1].rescueExpired();
    await waitFor('the join ran after its parent was retried', async () => (await stateOf(join)) === 'done', { timeoutMs: 20_000, everyMs: 20 });
    expect(await queue().get(parent)).toMatchObject({ state: 'done', attempt: 2 });
  });

  it.each(['dep.split', 'dep.split.tx'])('a %s handler fans out with ctx.enqueue and joins the parts; a failed attempt leaves none of its follow-ups', async (splitQueue) => {
    const other = await queue().enqueue('dep.part', { n: 100 });
    const splits = await Promise.all(
      Array.from({ length: 6 }, (_, k) => instances[k % 3].queue.enqueue(splitQueue, { parts: 3 + k, also: k === 0 ? other : undefined, failFirst: k % 2 === 1 })),
    );
    const children = async (id: string) =>
      db.sql<{ id: string; queue: string; state: string }>(
        `SELECT id::text, queue, state FROM pgqueue.task WHERE parent_id = $1 UNION ALL SELECT id::text, queue, state FROM pgqueue.task_archive WHERE parent_id = $1`,
        [id],
      );
    await waitFor('every join ran', async () => {
      for (const id of splits) if (!(await children(id)).some((c) => c.queue === 'dep.join' && c.state === 'done')) return false;
      return true;
    }, { timeoutMs: 60_000, everyMs: 50 });
    for (const [k, id] of splits.entries()) {
      const kids = await children(id);
      const parts = kids.filter((c) => c.queue === 'dep.part').map((c) => c.id);
      const [join, ...moreJoins] = kids.filter((c) => c.queue === 'dep.join');
      expect({ k, parts: parts.length, joins: 1 + moreJoins.length }).toEqual({ k, parts: 3 + k, joins: 1 });
      const [run, ...again] = byId(join.id);
      const dependsOn = k === 0 ? [...parts, other] : parts;
      expect(again).toHaveLength(0);
      expect(Object.keys(run.results!).sort()).toEqual([...dependsOn].sort());
      expect(dependsOn.every((p) => byId(p)[0].end <= run.start)).toBe(true);
      expect(await queue().get(id)).toMatchObject({ state: 'done', attempt: k % 2 === 1 ? 2 : 1 });
    }
    const graph = await queue().chain(splits[0]);
    expect(graph.filter((s) => s.queue === 'dep.join').map((s) => s.dependsOn!.length)).toEqual([4]);
  });

  it('ctx.enqueue refuses a dependsOn that names a later follow-up, a missing task or the enqueuing task, and writes none of them', async () => {
    splitErrors.length = 0;
    const id = await queue().enqueue('dep.split.bad', {});
    await waitFor('the handler is done', async () => (await stateOf(id)) === 'done', { timeoutMs: 20_000, everyMs: 20 });
    expect(splitErrors).toEqual(['invalid', 'invalid', 'not-found', 'invalid', 'invalid']);
    const kids = await db.sql<{ queue: string }>(`SELECT queue FROM pgqueue.task WHERE parent_id = $1 UNION ALL SELECT queue FROM pgqueue.task_archive WHERE parent_id = $1`, [id]);
    expect(kids.map((k) => k.queue)).toEqual(['dep.part']);
    expect(await queue().get(id)).toMatchObject({ result: 0 });
    // The follow-up runs on: the next test counts live tasks.
    await waitFor('its follow-up is done', async () => (await db.sql('SELECT 1 FROM pgqueue.task WHERE parent_id = $1', [id])).length === 0, {
      timeoutMs: 20_000,
      everyMs: 20,
    });
  });

  it('bad dependsOn values are typed errors and write nothing', async () => {
    const count = async () => (await db.sql('SELECT count(*)::int AS n FROM pgqueue.task'))[0].n as number;
    const before = await count();
    await expect(queue().enqueue('dep.join', {}, { dependsOn: ['999999999'] })).rejects.toBeInstanceOf(DependencyNotFoundError);
    const cases: unknown[] = [[], 'x', [-1], ['abc'], [{ item: 0 }], [{ item: -1 }], [1.5], [null], ['99999999999999999999']];
    for (const dependsOn of cases) {
      const err = await queue().enqueue('dep.join', {}, { dependsOn: dependsOn as never }).catch((e: unknown) => e);
      expect({ dependsOn, typed: err instanceof InvalidEnqueueOptionsError }).toEqual({ dependsOn, typed: true });
    }
    const parent = await queue().enqueue('dep.part', { n: 1 }, { delayMs: 60_000 });
    const withKey = await queue().enqueue('dep.join', {}, { dependsOn: [parent], key: 'k' }).catch((e: unknown) => e);
    expect(withKey).toBeInstanceOf(InvalidEnqueueOptionsError);
    const cycle = await queue()
      .enqueueMany([
        { queue: 'dep.join', payload: {}, options: { dependsOn: [{ item: 1 }] } },
        { queue: 'dep.join', payload: {}, options: { dependsOn: [{ item: 0 }] } },
      ])
      .catch((e: unknown) => e);
    expect(cycle).toBeInstanceOf(InvalidEnqueueOptionsError);
    // One good row and one that names a missing task: neither is written.
    const mixed = await queue()
      .enqueueMany([
        { queue: 'dep.part', payload: { n: 1 } },
        { queue: 'dep.join', payload: {}, options: { dependsOn: [{ item: 0 }, '888888888'] } },
      ])
      .catch((e: unknown) => e);
    expect(mixed).toBeInstanceOf(DependencyNotFoundError);
    expect(await count()).toBe(before + 1); // only `parent`
    await queue().cancel(parent);
  });

  it('one enqueueMany of 2 000 joins and their fan-in, through a database 3 ms away: one transaction within its bounds, each parent\'s dependants written once, every join run once with its parents\' results', async () => {
    const JOINS = 2000;
    const done = await queue().enqueue('dep.part', { n: 7 });
    await waitFor('the done parent is archived', async () => (await stateOf(done)) === 'done', { timeoutMs: 20_000, everyMs: 20 });
    // Runs at once: it may end before, while or after the joins go in (each way must be seen).
    const racing = await queue().enqueue('dep.part', { n: 8, ms: 0 });
    const proxy = new StallProxy(Number(new URL(db.url).port));
    await proxy.start();
    proxy.delayMs = 3;
    const slow = new PrismaClient({ adapter: new PrismaPg({ connectionString: proxy.url(db.url), max: 2 }) });
    let ids: string[];
    try {
      const repo = new TaskRepository('pgqueue', 'archive');
      ids = await repo.insert(slow, [
        // Three parents in the same call, held back until the joins are checked.
        ...[0, 1, 2].map((n) => taskRow('dep.part', { payloadJson: JSON.stringify({ n }), delayMs: 600_000 })),
        ...Array.from({ length: JOINS }, (_, j) =>
          taskRow('dep.join.wide', { payloadJson: JSON.stringify({ j }), dependsOn: [{ item: j % 3 }, { item: (j + 1) % 3 }, { id: done }, { id: racing }] })),
        taskRow('dep.join', { payloadJson: '{"fanIn":true}', dependsOn: Array.from({ length: JOINS }, (_, j) => ({ item: 3 + j })) }),
      ]);
    } finally {
      await slow.$disconnect();
      await proxy.close();
    }
    const parents = ids.slice(0, 3);
    const joins = ids.slice(3, 3 + JOINS);
    const fanIn = ids[3 + JOINS];
    const parentsOf = (j: number) => [parents[j % 3], parents[(j + 1) % 3], done, racing];
    const byNumber = (a: string, b: string) => Number(a) - Number(b);
    const rows = await db.sql<{ id: string; state: string; deps_left: number; depends_on: string[]; dependants: string[] | null; parent_results: Record<string, unknown> | null }>(
      'SELECT id::text, state, deps_left, depends_on::text[], dependants::text[], parent_results FROM pgqueue.task WHERE id = ANY ($1::bigint[])',
      [ids],
    );
    const row = new Map(rows.map((r) => [r.id, r]));
    for (const [k, p] of parents.entries()) {
      const want = joins.filter((_, j) => j % 3 === k || (j + 1) % 3 === k);
      expect({ parent: k, dependants: row.get(p)!.dependants }).toEqual({ parent: k, dependants: want });
    }
    for (const [j, id] of joins.entries()) {
      const r = row.get(id)!;
      // The racing parent counts as open until its debt is settled, or not at all when it was archived first.
      expect({ j, state: r.state, depsLeft: [2, 3].includes(r.deps_left), dependsOn: r.depends_on, dependants: r.dependants, done: r.parent_results?.[done] })
        .toEqual({ j, state: 'waiting', depsLeft: true, dependsOn: [...parentsOf(j)].sort(byNumber), dependants: [fanIn], done: { n: 7, square: 49 } });
    }
    expect(row.get(fanIn)).toMatchObject({ state: 'waiting', deps_left: JOINS, depends_on: joins, dependants: null, parent_results: null });

    await db.sql("UPDATE pgqueue.task SET run_at = now() WHERE id = ANY ($1::bigint[])", [parents]);
    await waitFor('the fan-in ran', async () => byId(fanIn).length > 0 && Number.isFinite(byId(fanIn)[0].end), { timeoutMs: 90_000, everyMs: 100 });
    for (const [j, id] of joins.entries()) {
      const [run, ...again] = byId(id);
      const want = Object.fromEntries(parentsOf(j).map((p) => [p, byId(p)[0]?.end <= run.start ? { n: p === done ? 7 : p === racing ? 8 : parents.indexOf(p), square: (p === done ? 49 : p === racing ? 64 : parents.indexOf(p) ** 2) } : 'ran after']));
      expect({ j, again: again.length, results: run.results }).toEqual({ j, again: 0, results: want });
    }
    const [run, ...again] = byId(fanIn);
    expect({ again: again.length, results: run.results }).toEqual({ again: 0, results: Object.fromEntries(joins.map((id) => [id, 4])) });
  }, 180_000);

  it('a handler result that cannot be stored fails the task as dead with a clear error', async () => {
    const id = await queue().enqueue('dep.bad.result', {});
    await waitFor('the task is dead', async () => (await stateOf(id)) === 'dead', { timeoutMs: 20_000, everyMs: 20 });
    expect((await queue().get(id))?.lastError).toMatch(/handler returned cannot be stored as its result.*BigInt/);
  });
});

/**
 * A completion batch whose attempts have follow-ups with dependsOn: one attempt at fault (a task
 * it named finished, and under `finished: 'delete'` vanished, between ctx.enqueue's check and the
 * completion) fails alone with a clear error; its neighbours in the batch complete, with their
 * follow-ups, on their first attempt.
 */
let raceDb: TestDatabase;
/** Lease mode: the split handlers return together, so their completions share one batch. */
let raceBarrier = { want: 0, arrived: 0, open: Promise.resolve(), release: () => undefined as void };
/** Opens when `want` split handlers arrived (Infinity: when the test calls raceBarrier.release()). */
function newBarrier(want: number) {
  let release!: () => void;
  const open = new Promise<void>((resolve) => (release = resolve));
  raceBarrier = { want, arrived: 0, open, release };
}

interface RacePayload {
  also?: string;
  vanish?: boolean;
}

async function splitAndJoin(task: Task<RacePayload>, ctx: LeaseTaskContext | TaskContext) {
  await ctx.enqueue('race.part', { n: 1 });
  await ctx.enqueue('race.join', {}, { dependsOn: task.payload.also ? [{ item: 0 }, task.payload.also] : [{ item: 0 }] });
  // What the named task's completion does under finished: 'delete', after ctx.enqueue checked it.
  if (task.payload.vanish) await raceDb.sql('DELETE FROM pgqueue.task WHERE id = $1', [task.payload.also]);
}

@Injectable()
class RaceHandlers {
  @TaskHandler('race.split', { mode: 'lease', concurrency: 4, maxAttempts: 1, leaseMs: 1500 })
  async split(task: Task<RacePayload>, ctx: LeaseTaskContext) {
    await splitAndJoin(task, ctx);
    if (++raceBarrier.arrived === raceBarrier.want) raceBarrier.release();
    await raceBarrier.open;
  }

  @TaskHandler('race.split.tx', { concurrency: 1, maxAttempts: 1, leaseMs: 1500 })
  async splitTx(task: Task<RacePayload>, ctx: TaskContext) {
    await ctx.tx.$executeRawUnsafe('INSERT INTO race_effect (task) VALUES ($1::bigint)', task.id);
    await splitAndJoin(task, ctx);
  }

  @TaskHandler('race.part', { mode: 'lease' })
  part() {
    return 'part';
  }

  @TaskHandler('race.join', { mode: 'lease' })
  join() {
    return 'join';
  }
}

describe('follow-ups with dependsOn in a completion batch (finished: delete)', () => {
  let app: QueueApp;

  beforeAll(async () => {
    raceDb = await createTestDatabase();
    await raceDb.sql('CREATE TABLE race_effect (task bigint NOT NULL)');
    app = await bootQueueApp(raceDb.prisma(6), [RaceHandlers], { databaseUrl: raceDb.url, finished: 'delete', pollIntervalMs: 200 });
  });
  afterAll(async () => {
    await app.close();
    await raceDb.drop();
  });

  it.each(['race.split', 'race.split.tx'])('%s: the attempt whose named task vanished fails alone, with a clear error; its batch neighbours complete', async (queue) => {
    // The named tasks wait (delayed): only the culprit's vanishes.
    const named = await app.queue.enqueueMany(Array.from({ length: 4 }, () => ({ queue: 'race.part', payload: { n: 0 }, options: { delayMs: 600_000 } })));
    if (queue === 'race.split') newBarrier(4);
    const splits = await app.queue.enqueueMany(named.map((also, k) => ({ queue, payload: { also, vanish: k === 1 } })));
    const culprit = splits[1];
    await waitFor('every split ended', async () => {
      const states = await Promise.all(splits.map(async (id) => (await app.queue.get(id))?.state ?? 'gone'));
      return states.every((state, k) => state === (k === 1 ? 'dead' : 'gone'));
    }, { timeoutMs: 20_000, everyMs: 20 });
    const info = await app.queue.get(culprit);
    expect(info).toMatchObject({ attempt: 1 });
    expect(info!.lastError).toMatch(new RegExp(`follow-ups.*could not be enqueued.*no task with id ${named[1]}`));
    // None of the culprit's follow-ups was written.
    expect(await raceDb.sql('SELECT id FROM pgqueue.task WHERE parent_id = $1', [culprit])).toEqual([]);
    // The neighbours completed on their first attempt (done tasks are deleted): their joins wait for the named tasks.
    for (const id of splits.filter((s) => s !== culprit)) {
      expect({ id, left: await app.queue.get(id) }).toEqual({ id, left: null });
      const kids = await raceDb.sql<{ queue: string; state: string }>('SELECT queue, state FROM pgqueue.task WHERE parent_id = $1 ORDER BY id', [id]);
      expect({ id, kids: kids.filter((k) => k.queue === 'race.join') }).toEqual({ id, kids: [{ queue: 'race.join', state: 'waiting' }] });
    }
    if (queue === 'race.split.tx') {
      // A transactional handler's writes commit exactly when its attempt completes: none for the culprit.
      const effects = await raceDb.sql<{ task: string }>('SELECT task::text FROM race_effect ORDER BY task');
      expect(effects.map((e) => e.task)).toEqual(splits.filter((s) => s !== culprit));
    }
    for (const id of named.filter((n) => n !== named[1])) await app.queue.cancel(id);
  });

  it('race.split: a batch whose follow-ups take longer than 5 s in all (named tasks\' rows held by other transactions) completes every attempt', async () => {
    const named = await app.queue.enqueueMany(Array.from({ length: 3 }, () => ({ queue: 'race.part', payload: { n: 0 }, options: { delayMs: 600_000 } })));
    newBarrier(Infinity);
    const splits = await app.queue.enqueueMany(named.map((also) => ({ queue: 'race.split', payload: { also } })));
    await waitFor('the three handlers enqueued', async () => raceBarrier.arrived === 3, { timeoutMs: 20_000, everyMs: 10 });
    // The named tasks' rows are locked for 2.5, 5 and 7.5 s: the batch's inserts take 7.5 s in all
    // (Prisma's default transaction timeout is 5 s), each attempt's less than the lock bound.
    const holding = raceDb.prisma(3);
    const holders = named.map((id, k) =>
      holding.$transaction(async (tx) => {
        await tx.$queryRawUnsafe('SELECT id FROM pgqueue.task WHERE id = $1::bigint FOR UPDATE', id);
        await tx.$executeRawUnsafe('SELECT pg_sleep($1)', 2.5 * (k + 1));
      }, { timeout: 20_000 }),
    );
    await sleep(300);
    raceBarrier.release();
    await Promise.all(holders);
    await waitFor('every split ended', async () => {
      const states = await Promise.all(splits.map(async (id) => (await app.queue.get(id))?.state ?? 'gone'));
      return states.every((state) => state !== 'running' && state !== 'pending');
    }, { timeoutMs: 20_000, everyMs: 20 });
    for (const id of splits) {
      expect({ id, left: await app.queue.get(id) }).toEqual({ id, left: null });
      const joins = await raceDb.sql<{ state: string }>("SELECT state FROM pgqueue.task WHERE parent_id = $1 AND queue = 'race.join'", [id]);
      expect({ id, joins }).toEqual({ id, joins: [{ state: 'waiting' }] });
    }
    for (const id of named) await app.queue.cancel(id);
  }, 30_000);
});

/**
 * Results over jsonb's limit (268 435 455 bytes for one object): a completion batch whose results
 * add up past it, and a fan-in whose parents' results do. 100 results of 2.8 MB (compressible: the
 * tables stay small; the limit counts uncompressed bytes).
 */
const BIG = 2_800_000;
const BIG_PARENTS = 100;

@Injectable()
class BigHandlers {
  @TaskHandler('big.part', { mode: 'lease', concurrency: 4 })
  part(task: Task<{ bytes: number }>) {
    return 'x'.repeat(task.payload.bytes);
  }

  @TaskHandler('big.join', { mode: 'lease' })
  async join(task: Task<unknown>, ctx: LeaseTaskContext) {
    runs.push({ id: task.id, queue: task.queue, start: now(), end: now() });
    return Object.keys(await ctx.parentResults()).length;
  }
}

describe('results over jsonb\'s limit', () => {
  let bigDb: TestDatabase;
  let app: QueueApp;
  const stateOf = async (id: string) => (await app.queue.get(id))?.state;

  beforeAll(async () => {
    bigDb = await createTestDatabase();
    app = await bootQueueApp(bigDb.prisma(6), [BigHandlers], { databaseUrl: bigDb.url, maxPayloadBytes: 4 * 1024 * 1024, pollIntervalMs: 200 });
  });
  afterAll(async () => {
    await app.close();
    await bigDb.drop();
  });

  it('a completion batch whose results add up past it completes (sent in several statements)', async () => {
    const repo = new TaskRepository('pgqueue', 'archive');
    const prisma = bigDb.prisma(2);
    const ids = await repo.insert(prisma, Array.from({ length: BIG_PARENTS }, () => taskRow('big.unhandled')));
    const { rows } = await repo.claim(prisma, 'big.unhandled', BIG_PARENTS, 'w', 60_000, 5);
    expect(rows).toHaveLength(BIG_PARENTS);
    const result = JSON.stringify('y'.repeat(BIG));
    const res = await repo.complete(prisma, rows.map((r) => ({ id: r.id, token: r.lease_token, startedAt: 0, finishedAt: 0, result })), []);
    expect(res.done.size).toBe(BIG_PARENTS);
    const [stored] = await bigDb.sql('SELECT count(*)::int AS n, min(length(result #>> \'{}\')) AS len FROM pgqueue.task_archive WHERE id = ANY ($1::bigint[])', [ids]);
    expect(stored).toEqual({ n: BIG_PARENTS, len: BIG });
  }, 120_000);

  it('a fan-in whose parents\' results pass it fails only its own join, with a clear error; other joins keep settling', async () => {
    const parents = await app.queue.enqueueMany(Array.from({ length: BIG_PARENTS }, () => ({ queue: 'big.part', payload: { bytes: BIG } })));
    const [wide, after] = await app.queue.enqueueMany([
      { queue: 'big.join', payload: {}, options: { dependsOn: parents } },
      { queue: 'big.join', payload: {}, options: { dependsOn: [{ item: 0 }] } },
    ]);
    await waitFor('every parent is done', async () => (await bigDb.sql("SELECT count(*)::int AS n FROM pgqueue.task_archive WHERE queue = 'big.part'"))[0].n === BIG_PARENTS, {
      timeoutMs: 90_000,
      everyMs: 100,
    });
    // A small fan-in whose debts come after the wide join's.
    const small = await app.queue.enqueue('big.part', { bytes: 10 });
    const smallJoin = await app.queue.enqueue('big.join', {}, { dependsOn: [small] });
    await waitFor('the small join ran', async () => (await stateOf(smallJoin)) === 'done', { timeoutMs: 90_000, everyMs: 100 });
    expect(await app.queue.get(smallJoin)).toMatchObject({ result: 1 });
    await waitFor('the wide join ended', async () => (await stateOf(wide)) === 'dead', { timeoutMs: 30_000, everyMs: 100 });
    const info = await app.queue.get(wide);
    expect(info).toMatchObject({ attempt: 0 });
    expect(info!.lastError).toMatch(/the results of the tasks it depends on could not be merged.*total size of jsonb object elements exceeds the maximum/);
    expect(runs.filter((r) => r.queue === 'big.join' && r.id === wide)).toHaveLength(0);
    await waitFor('its dependant was cancelled', async () => (await stateOf(after)) === 'cancelled', { timeoutMs: 20_000, everyMs: 50 });
    expect(await bigDb.sql('SELECT count(*)::int AS n FROM pgqueue.task_dependency_debt')).toEqual([{ n: 0 }]);
  }, 240_000);
});
