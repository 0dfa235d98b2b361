/**
 * Pausing and resuming a queue (or one partition): across several instances (one started after
 * the pause, one that never hears the notice), enqueue goes on, a running task finishes, nothing
 * is claimed, and a resume restarts the work at once (NOTIFY, not a poll); the pause survives a
 * restart and shows in stats(), the metrics, the health check, the CLI and the dashboard.
 */
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { Injectable, type INestApplication } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { Test } from '@nestjs/testing';
import { PgQueueDashboardModule, PgQueueModule, TaskHandler, TaskQueue, WorkerOrchestrator, type Task, type TaskEvent } from '@app/pg-queue';
import { PgQueueHealthIndicator, PgQueueHealthModule } from '@app/pg-queue/health';
import { PgQueueMetricsModule, QueueMetrics } from '@app/pg-queue/metrics';
import type { PrismaClient } from '../../src/generated/prisma/client';
import { claimSql, claimStatements } from '../../libs/pg-queue/src/sql/claim.sql';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import { bootQueueApp, deferred, nextEvents, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

const ROOT = path.resolve(__dirname, '..', '..');
/** Long enough that a wake-up within the test can only come from NOTIFY. */
const POLL_MS = 120_000;

const hold = { started: deferred(), release: deferred() };

@Injectable()
class PauseHandlers {
  @TaskHandler('pause.work', { mode: 'lease' })
  async work(task: Task<{ hold?: boolean }>) {
    if (task.payload.hold) {
      hold.started.resolve();
      await hold.release.promise;
    }
  }

  @TaskHandler('pause.parts', { mode: 'lease' })
  async parts(_task: Task) {}

  @TaskHandler('pause.limited', { mode: 'lease', partitionConcurrency: 2 })
  async limited(_task: Task) {}

  @TaskHandler('pause.global', { mode: 'transactional', globalConcurrency: 2 })
  async global(_task: Task) {}

  @TaskHandler('pause.kept', { mode: 'lease' })
  async kept(_task: Task) {}
}

describe('pause and resume', () => {
  let db: TestDatabase;
  const apps: QueueApp[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterEach(async () => {
    // A failed test leaves no instance claiming into the next one.
    for (const a of apps.splice(0)) await a.close().catch(() => undefined);
    await db.sql('DELETE FROM pgqueue.queue_pause');
  });
  afterAll(async () => {
    hold.release.resolve();
    for (const a of apps) await a.close().catch(() => undefined);
    await db.drop();
  });

  const boot = async (options: Parameters<typeof bootQueueApp>[2] = {}, imports: Parameters<typeof bootQueueApp>[3] = [], prisma?: PrismaClient) => {
    const qa = await bootQueueApp(prisma ?? db.prisma(4), [PauseHandlers], options, imports);
    apps.push(qa);
    return qa;
  };
  const listening = { databaseUrl: '', pollIntervalMs: POLL_MS, listenPollIntervalMs: POLL_MS };
  const workerOf = async (qa: QueueApp, queue: string) => (await qa.app.get(WorkerOrchestrator).health()).workers.find((w) => w.queue === queue)!;
  const state = async (qa: QueueApp, id: string) => (await qa.queue.get(id))?.state;

  it('stops claims on every instance, one started later and one that missed the notice included, while enqueue works and a running task finishes; resume restarts at once', async () => {
    const opts = { ...listening, databaseUrl: db.url };
    const a = await boot(opts);
    const b = await boot(opts);
    // No LISTEN and a poll period longer than the test: this instance never hears of the pause.
    const deaf = await boot({ pollIntervalMs: POLL_MS });
    const claimedBy = new Map<QueueApp, TaskEvent[]>();
    for (const qa of [a, b, deaf]) {
      claimedBy.set(qa, []);
      qa.queue.events$.subscribe((e) => e.type === 'claimed' && claimedBy.get(qa)!.push(e));
    }

    const held = await a.queue.enqueue('pause.work', { hold: true });
    await hold.started.promise;
    expect(await a.queue.pause('pause.work')).toBe(true);
    expect(await b.queue.pause('pause.work')).toBe(false); // already paused

    // Enqueue goes on (its NOTIFY reaches every listening instance).
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push(await b.queue.enqueue('pause.work', { i }));
    const late = await boot(opts); // started after the pause
    claimedBy.set(late, []);
    late.queue.events$.subscribe((e) => e.type === 'claimed' && claimedBy.get(late)!.push(e));

    // The listening instances stop claiming locally (NOTIFY), the late one from its start.
    await waitFor('every listening instance to know of the pause', async () => (await Promise.all([a, b, late].map((qa) => workerOf(qa, 'pause.work')))).every((w) => w.paused));

    // The claim statement refuses on its own, whatever an instance believes: run as any instance
    // that missed the notice would run it, it takes nothing and says why; a drain (which claims
    // whatever the instance believes) runs nothing anywhere, the deaf instance's included.
    const claim = await deaf.app.get(TaskRepository).claim(db.prisma(1), 'pause.work', 10, 'missed-the-notice', 30_000, 3);
    expect(claim).toMatchObject({ rows: [], paused: true });

    // The task under way finishes.
    hold.release.resolve();
    await waitFor('the running task to finish', async () => (await state(a, held)) === 'done');
    for (const qa of [a, b, late, deaf]) expect(await qa.app.get(WorkerOrchestrator).drain('pause.work')).toBe(0);

    for (const id of ids) expect(await state(a, id)).toBe('pending');
    const claimedIds = [...claimedBy.values()].flat().map((e) => e.taskId);
    for (const id of ids) expect(claimedIds).not.toContain(id);
    expect((await a.queue.stats()).find((s) => s.queue === 'pause.work')).toMatchObject({ paused: true, pending: 4, pausedPartitions: [] });

    // Resume: woken by NOTIFY (polls are POLL_MS apart), every task runs.
    await deaf.close();
    const completed = Promise.race([a, b, late].map((qa) => nextEvents(qa.queue.events$, (e) => e.type === 'completed' && ids.includes(e.taskId))));
    const t0 = Date.now();
    expect(await late.queue.resume('pause.work')).toBe(true);
    expect(await late.queue.resume('pause.work')).toBe(false);
    await completed;
    await waitFor('every task to run', async () => (await Promise.all(ids.map((id) => state(a, id)))).every((s) => s === 'done'));
    expect(Date.now() - t0).toBeLessThan(POLL_MS / 4);
    for (const qa of [a, b, late]) expect((await workerOf(qa, 'pause.work')).paused).toBe(false);
    for (const qa of [a, b, late]) await qa.close();
  });

  it('pauses one partition: the others run, on a plain queue and on one limited per partition; resume wakes its tasks', async () => {
    const qa = await boot({ ...listening, databaseUrl: db.url });
    for (const queue of ['pause.parts', 'pause.limited']) {
      expect(await qa.queue.pause(queue, { partition: 'p1' })).toBe(true);
      const enqueued: Record<string, string[]> = { p1: [], p2: [], none: [] };
      for (let i = 0; i < 2; i++) {
        enqueued.p1.push(await qa.queue.enqueue(queue as 'pause.parts', {}, { partition: 'p1' }));
        enqueued.p2.push(await qa.queue.enqueue(queue as 'pause.parts', {}, { partition: 'p2' }));
      }
      enqueued.none.push(await qa.queue.enqueue(queue as 'pause.parts', {}));
      const stats = (await qa.queue.stats()).find((s) => s.queue === queue);
      expect(stats).toMatchObject({ paused: false, pausedPartitions: ['p1'] });
      // Woken by each enqueue, the worker claims every task but the paused partition's.
      await waitFor(`${queue}: the unpaused tasks to run`, async () => (await Promise.all([...enqueued.p2, ...enqueued.none].map((id) => state(qa, id)))).every((s) => s === 'done'));
      expect(await qa.app.get(WorkerOrchestrator).drain(queue)).toBe(0);
      for (const id of enqueued.p1) expect(await state(qa, id)).toBe('pending');

      const t0 = Date.now();
      expect(await qa.queue.resume(queue, { partition: 'p1' })).toBe(true);
      await waitFor(`${queue}: the resumed partition's tasks to run`, async () => (await Promise.all(enqueued.p1.map((id) => state(qa, id)))).every((s) => s === 'done'));
      expect(Date.now() - t0).toBeLessThan(POLL_MS / 4);
    }
    await expect(qa.queue.pause('pause.parts', { partition: '' })).rejects.toThrow(/partition/);
    await expect(qa.queue.pause('pause.parts', { partitions: 'p1' } as never)).rejects.toThrow(/partitions/);
    await qa.close();
  });

  it('pauses a queue with a global concurrency limit (the limited claim checks it too)', async () => {
    const qa = await boot({ autoStart: false });
    await qa.queue.pause('pause.global');
    const id = await qa.queue.enqueue('pause.global', {});
    expect(await qa.app.get(WorkerOrchestrator).drain('pause.global')).toBe(0);
    expect(await state(qa, id)).toBe('pending');
    await qa.queue.resume('pause.global');
    expect(await qa.app.get(WorkerOrchestrator).drain('pause.global')).toBe(1);
    await qa.close();
  });

  it('survives a restart, and shows in stats(), the metrics gauge and the health check (a paused queue is not overdue)', async () => {
    const first = await boot({ autoStart: false });
    const id = await first.queue.enqueue('pause.kept', {});
    await first.queue.pause('pause.kept');
    await first.queue.pause('pause.empty'); // a paused queue without tasks shows too
    await first.close();

    const qa = await boot({ ...listening, databaseUrl: db.url }, [PgQueueMetricsModule, TerminusModule, PgQueueHealthModule]);
    expect((await workerOf(qa, 'pause.kept')).paused).toBe(true);
    expect(await qa.app.get(WorkerOrchestrator).drain('pause.kept')).toBe(0);
    expect(await state(qa, id)).toBe('pending');
    const stats = await qa.queue.stats();
    expect(stats.find((s) => s.queue === 'pause.kept')).toMatchObject({ paused: true, pending: 1 });
    expect(stats.find((s) => s.queue === 'pause.empty')).toMatchObject({ paused: true, pending: 0 });
    expect(await qa.queue.pausedQueues()).toEqual([
      { queue: 'pause.empty', partition: null, pausedAt: expect.any(Date) },
      { queue: 'pause.kept', partition: null, pausedAt: expect.any(Date) },
    ]);

    const metrics = await qa.app.get(QueueMetrics).metrics();
    expect(metrics).toContain('pgqueue_queue_paused{queue="pause.kept"} 1');
    expect(metrics).toContain('pgqueue_queue_paused{queue="pause.empty"} 1');

    // Its task has been due longer than the limit, and no instance claims it: by design.
    await waitFor('the task to be due for over 1 ms', async () => ((await qa.queue.stats()).find((s) => s.queue === 'pause.kept')?.oldestDueMs ?? 0) > 1);
    const health = await qa.app.get(PgQueueHealthIndicator).isHealthy('queue', { maxOldestDueMs: 1, maxUnhandledMs: 1 });
    expect(health.queue.status).toBe('up');
    expect(health.queue.queues).toEqual(expect.arrayContaining([expect.objectContaining({ queue: 'pause.kept', paused: true, due: 1 })]));
    expect(health.queue.workers).toEqual(expect.arrayContaining([expect.objectContaining({ queue: 'pause.kept', alive: true })]));

    await qa.queue.resume('pause.empty');
    await qa.queue.resume('pause.kept');
    await waitFor('the kept task to run after the resume', async () => (await state(qa, id)) === 'done');
    expect(await qa.app.get(QueueMetrics).metrics()).toContain('pgqueue_queue_paused{queue="pause.kept"} 0');
    await qa.close();
  });

  it('pause waits for the claims in flight, and a claim that starts while it waits sees the pause', async () => {
    const qa = await boot({ autoStart: false });
    await qa.queue.enqueue('pause.race', {});
    // A transaction that has read queue_pause, as a claim in flight has.
    const inFlight = db.prisma(1);
    const held = deferred();
    const holder = inFlight.$transaction(async (tx) => {
      await tx.$queryRawUnsafe('SELECT 1 FROM pgqueue.queue_pause LIMIT 1');
      await held.promise;
    }, { timeout: 60_000 });
    await waitFor('the holder to have read queue_pause', async () =>
      (await db.sql("SELECT 1 FROM pg_locks WHERE relation = 'pgqueue.queue_pause'::regclass AND mode = 'AccessShareLock' AND granted")).length > 0);
    let pausedAt = 0;
    const pausing = qa.queue.pause('pause.race').then((r) => ((pausedAt = Date.now()), r));
    await waitFor('the pause to wait for the claim in flight', async () =>
      (await db.sql("SELECT 1 FROM pg_locks WHERE relation = 'pgqueue.queue_pause'::regclass AND mode = 'AccessExclusiveLock' AND NOT granted")).length > 0);
    // A claim that starts now waits behind the pause, then reads the table after its commit.
    const claim = qa.app.get(TaskRepository).claim(db.prisma(1), 'pause.race', 10, 'racing-claimer', 30_000, 3);
    await waitFor('the claim to queue behind the pause', async () =>
      (await db.sql("SELECT 1 FROM pg_locks WHERE relation = 'pgqueue.queue_pause'::regclass AND mode = 'AccessShareLock' AND NOT granted")).length > 0);
    expect(pausedAt).toBe(0);
    held.resolve();
    await holder;
    expect(await pausing).toBe(true);
    expect(await claim).toMatchObject({ rows: [], paused: true });
  });

  it("costs an unpaused queue's claim two probes of queue_pause and nothing per task; a paused queue's claim reads no task (EXPLAIN ANALYZE, generic plan)", async () => {
    const qa = await boot({ autoStart: false });
    for (let i = 0; i < 50; i++) await qa.queue.enqueue('pause.plan', { i });
    const claimText = claimSql(claimStatements('pgqueue'), 10);
    const explain = async () => {
      await db.sql('BEGIN');
      try {
        await db.sql('SET LOCAL plan_cache_mode = force_generic_plan');
        await db.sql(`PREPARE claim_probe (text, int, text, int, int, text) AS ${claimText}`);
        const rows = await db.sql<{ 'QUERY PLAN': string }>(`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE claim_probe ('pause.plan', 10, 'w', 30000, 3, '0123456789abcdef')`);
        return rows.map((r) => r['QUERY PLAN']).join('\n');
      } finally {
        await db.sql('ROLLBACK'); // the claim's update too
        await db.sql('DEALLOCATE claim_probe');
      }
    };
    const queuePauseReads = (plan: string) => plan.split('\n').filter((l) => /Scan .*on queue_pause/.test(l));

    const unpaused = await explain();
    expect(unpaused).toMatch(/Index Scan using task_claim_idx on task t \(actual rows=10 loops=1\)/);
    // Two probes, once each; the per-task probe of paused partitions is never run.
    const reads = queuePauseReads(unpaused);
    expect(reads.filter((l) => /\(actual rows=0 loops=1\)/.test(l))).toHaveLength(2);
    expect(reads.filter((l) => !/\(actual rows=0 loops=1\)|never executed/.test(l))).toEqual([]);

    await qa.queue.pause('pause.plan');
    const paused = await explain();
    expect(paused).toMatch(/Index Scan using task_claim_idx on task t \(never executed\)/);
    expect(paused).toMatch(/One-Time Filter: .*NOT \$\d+/);
  });

  it('pause and resume from the CLI', async () => {
    const cli = (...args: string[]) => {
      const res = spawnSync(process.execPath, ['-r', path.join(ROOT, 'test/support/ts-register.js'), path.join(ROOT, 'libs/pg-queue/src/cli/main.ts'), ...args], {
        cwd: ROOT,
        env: { ...process.env, DATABASE_URL: db.url },
        encoding: 'utf8',
        timeout: 60_000,
      });
      return { code: res.status, out: res.stdout, err: res.stderr };
    };
    const qa = await boot({ autoStart: false });
    expect(cli('pause', 'pause.cli')).toEqual({ code: 0, out: 'pause.cli paused\n', err: '' });
    expect(cli('pause', 'pause.cli').code).toBe(1); // already paused: nothing to do
    expect(cli('pause', 'pause.cli', '--partition', 'tenant-7')).toMatchObject({ code: 0, out: 'partition tenant-7 of pause.cli paused\n' });
    expect((await qa.queue.stats()).find((s) => s.queue === 'pause.cli')).toMatchObject({ paused: true, pausedPartitions: ['tenant-7'] });
    const stats = cli('stats');
    expect(stats.out).toMatch(/^queue\s.*\spaused$/m);
    expect(stats.out).toMatch(/^pause\.cli\s.*\syes$/m);
    expect(JSON.parse(cli('--json', 'stats').out)).toEqual(expect.arrayContaining([expect.objectContaining({ queue: 'pause.cli', paused: true, pausedPartitions: ['tenant-7'] })]));
    expect(cli('resume', 'pause.cli')).toEqual({ code: 0, out: 'pause.cli resumed\n', err: '' });
    expect(cli('resume', 'pause.cli', '--partition', 'tenant-7').code).toBe(0);
    expect(cli('resume', 'pause.cli')).toMatchObject({ code: 1, out: 'pause.cli was not paused\n' });
    expect(cli('pause', 'bad queue name!').code).toBe(2);
    expect(await qa.queue.pausedQueues()).toEqual([]);
    await qa.close();
  });

  describe('the dashboard (HTTP)', () => {
    let app: INestApplication;
    let base: string;
    let queue: TaskQueue;

    beforeAll(async () => {
      const moduleRef = await Test.createTestingModule({
        imports: [
          PgQueueModule.forRoot({ prisma: db.prisma(4), autoStart: false }),
          PgQueueDashboardModule.forRoot({ path: '/queues', guard: 'none' }),
          PgQueueDashboardModule.forRoot({ path: '/ro', guard: 'none', readOnly: true }),
        ],
        providers: [PauseHandlers],
      }).compile();
      app = moduleRef.createNestApplication({ logger: ['error'] });
      await app.listen(0, '127.0.0.1');
      base = (await app.getUrl()).replace('[::1]', '127.0.0.1');
      queue = app.get(TaskQueue);
      await queue.enqueue('pause.dash', {});
    });
    afterAll(async () => {
      await app?.close();
    });

    const page = async (p: string) => (await fetch(`${base}${p}`)).text();
    const post = (p: string, fields: Record<string, string>) => fetch(`${base}${p}`, { method: 'POST', body: new URLSearchParams(fields), redirect: 'manual' });
    const csrf = (html: string) => /name="_csrf" value="([^"]+)"/.exec(html)![1];

    it('pauses and resumes a queue from the overview, behind the form token, not when read-only', async () => {
      const overview = await page('/queues');
      expect(overview).toMatch(/action="\/queues\/pause"[\s\S]*?name="queue" value="pause\.dash"[\s\S]*?>Pause</);
      const token = csrf(overview);

      expect((await post('/queues/pause', { queue: 'pause.dash' })).status).toBe(403); // no form token
      expect((await post('/ro/pause', { queue: 'pause.dash', _csrf: token })).status).toBe(403); // read-only
      expect(await page('/ro')).not.toContain('/ro/pause');
      expect(await queue.pausedQueues()).toEqual([]);

      const paused = await post('/queues/pause', { queue: 'pause.dash', _csrf: token });
      expect(paused.status).toBe(303);
      expect(paused.headers.get('location')).toBe('/queues?notice=paused');
      expect(await queue.pausedQueues()).toEqual([expect.objectContaining({ queue: 'pause.dash', partition: null })]);
      const after = await page('/queues?notice=paused');
      expect(after).toContain('Queue paused');
      expect(after).toMatch(/pause\.dash<\/a> <span class="badge st-paused"/);
      expect(after).toMatch(/action="\/queues\/resume"[\s\S]*?name="queue" value="pause\.dash"[\s\S]*?>Resume</);
      expect(await page('/ro')).toContain('st-paused'); // shown, without a button

      const resumed = await post('/queues/resume', { queue: 'pause.dash', _csrf: token });
      expect(resumed.status).toBe(303);
      expect(resumed.headers.get('location')).toBe('/queues?notice=resumed');
      expect(await queue.pausedQueues()).toEqual([]);
      expect((await post('/queues/pause', { queue: 'not a queue!', _csrf: token })).status).toBe(400);
    });
  });
});
