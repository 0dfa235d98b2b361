/**
 * A rolling deploy from the release before workflows (issue 41, defect 10): that release's worker,
 * its own library code checked out of this repository's history, runs beside this one against
 * the same schema. It runs a workflow's children (a plain task queue it handles) and settles
 * dependency debts with its own statements; a parent must still get each child's result, and a
 * dead child must reach it as ChildWorkflowError.
 */
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { ChildWorkflowError, TaskHandler, Workflow, type LeaseTaskContext, type Task, type WorkflowContext } from '@app/pg-queue';
import type * as PgQueue from '@app/pg-queue';
import { bootQueueApp, deferred, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

/** The last commit before migration 17 (workflows): the release an upgrade to workflows comes from. */
const BEFORE_WORKFLOWS = '7c40073b7e94aad9d21b8ed80ddbf5883b8f4aff';

@Injectable()
class Parents {
  /** Two workflows whose children share a key: both wait for the one task. */
  @Workflow('old.keyed', { maxAttempts: 3 })
  async keyed(input: { x: number }, wf: WorkflowContext) {
    return wf.child<{ doubled: number }>('double', 'new.child', { x: input.x }, { key: `shared-${input.x}` });
  }

  @Workflow('old.parent', { maxAttempts: 3 })
  async parent(input: { x: number }, wf: WorkflowContext) {
    try {
      return { doubled: await wf.child<{ doubled: number }>('double', 'old.child', { x: input.x }) };
    } catch (err) {
      if (!(err instanceof ChildWorkflowError)) throw err;
      return { caught: err.state };
    }
  }
}

/** This release's handler of the keyed children, held until both parents wait for the one task. */
@Injectable()
class NewChildren {
  static go = Promise.resolve();
  @TaskHandler('new.child', { mode: 'lease' })
  async run(task: Task<{ x: number }>, _ctx: LeaseTaskContext) {
    await NewChildren.go;
    return { doubled: task.payload.x * 2 };
  }
}

/** The old release's library, loaded from its own source (transformed by Jest like ours). */
function loadOldRelease(): { lib: typeof PgQueue; dir: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgqueue-old-release-'));
  const archive = execFileSync('git', ['archive', BEFORE_WORKFLOWS, 'libs/pg-queue/src'], { cwd: path.join(__dirname, '../..'), maxBuffer: 64 << 20 });
  execFileSync('tar', ['-x', '-C', dir], { input: archive });
  // Its imports of @nestjs, pg, ... resolve to this checkout's packages (the same versions).
  fs.symlinkSync(path.join(__dirname, '../../node_modules'), path.join(dir, 'node_modules'));
  return { lib: require(path.join(dir, 'libs/pg-queue/src')) as typeof PgQueue, dir };
}

/** Boots the old release's module with a handler for the children's queue: doubles x, dies on a negative x. */
async function bootOldWorker(lib: typeof PgQueue, db: TestDatabase, finished: 'archive' | 'delete' = 'archive'): Promise<INestApplicationContext> {
  @Injectable()
  class OldChildren {
    async run(task: { payload: { x: number } }) {
      if (task.payload.x < 0) throw new Error('negative');
      return { doubled: task.payload.x * 2 };
    }
  }
  const descriptor = Object.getOwnPropertyDescriptor(OldChildren.prototype, 'run')!;
  lib.TaskHandler('old.child', { maxAttempts: 1 })(OldChildren.prototype, 'run', descriptor);
  const moduleRef = await Test.createTestingModule({
    imports: [lib.PgQueueModule.forRoot({ prisma: db.prisma(), pollIntervalMs: 200, rescueIntervalMs: 200, shutdownTimeoutMs: 5000, finished })],
    providers: [OldChildren],
  }).compile();
  return moduleRef.init();
}

describe('a rolling deploy from the release before workflows', () => {
  let db: TestDatabase;
  let old: { lib: typeof PgQueue; dir: string };

  beforeAll(async () => {
    db = await createTestDatabase({ queueSchema: false });
    old = loadOldRelease();
  });
  afterAll(async () => {
    await db.drop();
    fs.rmSync(old.dir, { recursive: true, force: true });
  });

  const outcome = async (id: string) => (await db.sql<{ state: string; result: unknown }>('SELECT state, result FROM pgqueue.task_archive WHERE id = $1', [id]))[0];
  const parkedOnChild = async (ids: string[]) =>
    (await db.sql<{ n: number }>("SELECT count(*)::int AS n FROM pgqueue.task WHERE id = ANY ($1::bigint[]) AND state = 'waiting' AND waiting_for LIKE 'child:%'", [ids]))[0].n === ids.length;

  it('children that an old instance ran while this release was down reach their parents, a dead one as ChildWorkflowError', async () => {
    let current: QueueApp = await bootQueueApp(db.prisma(), [Parents], { rescueIntervalMs: 200 });
    const ok = await current.queue.enqueue('old.parent', { x: 21 });
    const dies = await current.queue.enqueue('old.parent', { x: -1 });
    await waitFor('both parents parked on their children', () => parkedOnChild([ok, dies]));
    await current.close();

    // The deploy rolls back onto the old release for a while: it runs the children and settles.
    const oldApp = await bootOldWorker(old.lib, db);
    try {
      await waitFor('both children ended', async () => {
        const [{ n }] = await db.sql<{ n: number }>(
          `SELECT count(*)::int AS n FROM (SELECT id FROM pgqueue.task_archive WHERE queue = 'old.child'
             UNION ALL SELECT id FROM pgqueue.task WHERE queue = 'old.child' AND state = 'dead') c`,
        );
        return n === 2;
      });
      await waitFor('no dependency debt left for the old release to settle', async () => (await db.sql('SELECT 1 FROM pgqueue.task_dependency_debt')).length === 0);
    } finally {
      await oldApp.close();
    }

    current = await bootQueueApp(db.prisma(), [Parents], { rescueIntervalMs: 200 });
    try {
      expect(await waitFor('the parent of the done child done', () => outcome(ok))).toEqual({ state: 'done', result: { doubled: { doubled: 42 } } });
      expect(await waitFor('the parent of the dead child done', () => outcome(dies))).toEqual({ state: 'done', result: { caught: 'dead' } });
    } finally {
      await current.close();
    }
  });

  it("children that an old instance ran under finished: 'delete' (no row left) reach their parents as done", async () => {
    let current: QueueApp = await bootQueueApp(db.prisma(), [Parents], { rescueIntervalMs: 200 });
    const id = await current.queue.enqueue('old.parent', { x: 5 });
    await waitFor('the parent parked on its child', () => parkedOnChild([id]));
    await current.close();
    const oldApp = await bootOldWorker(old.lib, db, 'delete');
    try {
      await waitFor('the child ended without a trace', async () => (await db.sql('SELECT 1 FROM pgqueue.task WHERE parent_id = $1 UNION ALL SELECT 1 FROM pgqueue.task_archive WHERE parent_id = $1', [id])).length === 0);
    } finally {
      await oldApp.close();
    }
    current = await bootQueueApp(db.prisma(), [Parents], { rescueIntervalMs: 200 });
    try {
      // Its result was not kept: the parent gets null, as a fan-in dependant of a deleted parent does.
      expect(await waitFor('the parent done', () => outcome(id))).toEqual({ state: 'done', result: { doubled: null } });
    } finally {
      await current.close();
    }
  });

  it('two workflows whose children share a key both get the one task\'s result, told by its end (not by a rescuer pass)', async () => {
    const gate = deferred();
    NewChildren.go = gate.promise;
    // Rescuer passes far apart: only the child's end (its debts and their notification) can tell the parents in time.
    const current = await bootQueueApp(db.prisma(), [Parents, NewChildren], { rescueIntervalMs: 120_000, databaseUrl: db.url });
    try {
      const a = await current.queue.enqueue('old.keyed', { x: 7 });
      await waitFor('the first parked on its child', () => parkedOnChild([a]));
      const b = await current.queue.enqueue('old.keyed', { x: 7 });
      await waitFor('both parked on the one child', () => parkedOnChild([a, b]));
      gate.resolve();
      expect(await waitFor('the first done', () => outcome(a), { timeoutMs: 10_000 })).toEqual({ state: 'done', result: { doubled: 14 } });
      expect(await waitFor('the second done', () => outcome(b), { timeoutMs: 10_000 })).toEqual({ state: 'done', result: { doubled: 14 } });
    } finally {
      await current.close();
    }
  });

  it('beside a running old instance, parents get their children results whichever instance ends or settles them', async () => {
    const current = await bootQueueApp(db.prisma(), [Parents], { rescueIntervalMs: 200 });
    const oldApp = await bootOldWorker(old.lib, db);
    try {
      const ids = [];
      for (let i = 1; i <= 6; i++) ids.push(await current.queue.enqueue('old.parent', { x: i % 3 === 0 ? -i : i }));
      for (const [i, id] of ids.entries()) {
        const x = i + 1;
        const expected = x % 3 === 0 ? { caught: 'dead' } : { doubled: { doubled: 2 * x } };
        expect(await waitFor(`parent ${id} done`, () => outcome(id))).toEqual({ state: 'done', result: expected });
      }
    } finally {
      await oldApp.close();
      await current.close();
    }
  });
});
