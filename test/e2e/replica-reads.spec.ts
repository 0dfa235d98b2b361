import { Injectable, type INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { spawnSync } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import * as path from 'node:path';
import { PrismaPg } from '@prisma/adapter-pg';
import { PgQueueDashboardModule, PgQueueModule, TaskHandler, TaskQueue, WorkerOrchestrator } from '@app/pg-queue';
import { PgQueueMetricsModule, QueueMetrics } from '@app/pg-queue/metrics';
import { PrismaClient } from '../../src/generated/prisma/client';
import { startReplicatedPair, type ReplicatedPair } from '../support/replicated-pair';
import { queueStates } from '../support/task-ledger';
import { waitFor } from '../support/wait-for';

/**
 * Issue 26, item 4: reads from a replica. The app's PgQueueModule gets `readPrisma`, a Prisma
 * client on the synchronous standby of a replicated pair (test/support/replicated-pair.ts). With
 * the standby's replay paused (`pg_wal_replay_pause()`: it still receives the WAL, so synchronous
 * commits go on, but shows nothing new), the reads that count or list show the figure from before
 * the pause, which only the standby can have, while reads by id (get right after an enqueue),
 * changes, claims and completions go to the primary.
 */
const ROOT = path.resolve(__dirname, '..', '..');
const QUEUE = 'replica.work';

@Injectable()
class ReplicaHandlers {
  @TaskHandler(QUEUE)
  async work() {}
}

describe('reads from a replica (readPrisma): the standby of a replicated pair', () => {
  let pair: ReplicatedPair;
  let app: INestApplication;
  let queue: TaskQueue;
  let base: string;
  const prismas: PrismaClient[] = [];
  const standby = (text: string) => pair.sql(pair.standby, text);
  const primaryStates = () => queueStates((text, values) => pair.sql(pair.primary, text, values), QUEUE);
  const pending = async () => (await queue.stats()).find((s) => s.queue === QUEUE)?.pending ?? 0;

  /** `pg-queue ...args` as a user runs it (see cli.spec.ts), with exactly the environment given. */
  const cli = (args: string[], env: NodeJS.ProcessEnv) => {
    const { DATABASE_URL: _unset, ...rest } = process.env;
    const res = spawnSync(process.execPath, ['-r', path.join(ROOT, 'test/support/ts-register.js'), path.join(ROOT, 'libs/pg-queue/src/cli/main.ts'), ...args], {
      cwd: ROOT,
      env: { ...rest, ...env },
      encoding: 'utf8',
      timeout: 60_000,
    });
    return { code: res.status, out: res.stdout, err: res.stderr };
  };

  function prismaOn(url: string, name: string): PrismaClient {
    const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: url, max: 4, application_name: name }) });
    prismas.push(prisma);
    return prisma;
  }

  beforeAll(async () => {
    pair = await startReplicatedPair('replica');
    const moduleRef = await Test.createTestingModule({
      imports: [
        PgQueueModule.forRoot({ prisma: prismaOn(pair.primary.url, 'primary'), readPrisma: prismaOn(pair.standby.url, 'replica reads'), autoStart: false, pollIntervalMs: 100 }),
        PgQueueDashboardModule.forRoot({ guard: 'none' }),
        PgQueueMetricsModule,
      ],
      providers: [ReplicaHandlers],
    }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.listen(0, '127.0.0.1');
    base = `http://127.0.0.1:${(app.getHttpServer().address() as AddressInfo).port}/queues`;
    queue = app.get(TaskQueue);
  }, 120_000);
  afterAll(async () => {
    await app?.close();
    await Promise.all(prismas.map((p) => p.$disconnect().catch(() => undefined)));
    pair?.stop();
  });

  it('counts and lists come from the replica (stale while its replay is paused); get(id) after an enqueue, changes and claims go to the primary', async () => {
    const before = await queue.enqueueMany(Array.from({ length: 5 }, (_, n) => ({ queue: QUEUE, payload: { n } })));
    await waitFor('the replica to show the first 5 tasks', async () => (await pending()) === 5);

    await standby('SELECT pg_wal_replay_pause()');
    await waitFor('replay paused on the standby', async () => (await standby('SELECT pg_get_wal_replay_pause_state() AS s'))[0].s === 'paused');
    const fresh = await queue.enqueueMany(Array.from({ length: 3 }, (_, n) => ({ queue: QUEUE, payload: { n: 5 + n } })));
    expect(await primaryStates()).toMatchObject({ pending: 8 });

    // Read your writes: the task enqueued a moment ago, by id, from the primary.
    expect(await queue.get(fresh[0])).toMatchObject({ id: fresh[0], state: 'pending', payload: { n: 5 } });
    expect(await queue.getLogs(fresh[0])).toEqual([]);
    expect((await queue.chain(fresh[0])).map((s) => s.id)).toEqual([fresh[0]]);
    // A change goes to the primary (the standby would refuse it) and is seen by id at once.
    expect(await queue.cancel(fresh[2])).toBe('cancelled');
    expect((await queue.get(fresh[2]))?.state).toBe('cancelled');

    // Counts and lists: the replica's figure from before the pause, which the primary no longer has.
    expect((await queue.stats()).find((s) => s.queue === QUEUE)).toMatchObject({ pending: 5, cancelled: 0 });
    expect((await queue.list({ queue: QUEUE })).map((t) => t.id).sort()).toEqual([...before].sort());
    expect(await app.get(QueueMetrics).metrics()).toContain(`pgqueue_tasks{queue="${QUEUE}",state="due"} 5`);
    const list = await (await fetch(`${base}/tasks?queue=${QUEUE}`)).text();
    expect(before.every((id) => list.includes(`/tasks/${id}"`))).toBe(true);
    expect(fresh.some((id) => list.includes(`/tasks/${id}"`))).toBe(false);
    // The other counting reads run on the standby too (a write there would be refused read-only).
    for (const page of ['', '/schedules']) expect((await fetch(`${base}${page}`)).status).toBe(200);
    expect(await queue.topErrors(QUEUE)).toEqual([]);
    expect(await queue.hourly({ queue: QUEUE })).toEqual([]);
    // Pauses are read from the primary (a tiny table operators act on): a pause just made shows at
    // once in pausedQueues() and the dashboard's overview (Resume), whatever the replica's lag;
    // stats() shows the replica's picture, pauses included.
    expect(await queue.pause(QUEUE)).toBe(true);
    expect(await queue.pausedQueues()).toEqual([expect.objectContaining({ queue: QUEUE, partition: null })]);
    expect((await queue.stats()).find((s) => s.queue === QUEUE)).toMatchObject({ paused: false });
    expect(await (await fetch(`${base}/`)).text()).toContain('Resume');
    expect(await queue.resume(QUEUE)).toBe(true);
    expect(await queue.listSchedules()).toEqual([]);
    // The task page reads the primary: an action redirects to it.
    const page = await fetch(`${base}/tasks/${fresh[0]}`);
    expect(page.status).toBe(200);

    // The CLI: --read-url for the counts; `stats` never needs the primary, `show` (by id) does.
    const replicaOnly = cli(['--json', 'stats', '--read-url', pair.standby.url], {});
    expect(replicaOnly).toMatchObject({ code: 0, err: '' });
    expect(JSON.parse(replicaOnly.out)).toEqual([expect.objectContaining({ queue: QUEUE, pending: 5, cancelled: 0 })]);
    const shown = cli(['--json', 'show', fresh[1], '--read-url', pair.standby.url], { DATABASE_URL: pair.primary.url });
    expect({ code: shown.code, task: JSON.parse(shown.out) }).toMatchObject({ code: 0, task: { id: fresh[1], state: 'pending' } });
    expect(cli(['show', fresh[1], '--read-url', pair.standby.url], {})).toMatchObject({ code: 3, err: expect.stringContaining('pg-queue: no database: pass --database-url') });
    expect(cli(['stats', '--read-url', 'mysql://replica/app'], {})).toMatchObject({ code: 3, err: expect.stringContaining('pg-queue: --read-url is not a postgresql:// URL') });

    // Claims and completions on the primary while the replica stands still.
    await app.get(WorkerOrchestrator).start();
    await waitFor('the primary to have every task done', async () => (await primaryStates()).done === 7);
    expect(await pending()).toBe(5);
    const replicaSessions = await standby("SELECT application_name AS name FROM pg_stat_activity WHERE backend_type = 'client backend' AND application_name <> '' ORDER BY 1");
    expect(new Set(replicaSessions.map((r) => r.name))).toEqual(new Set(['replica reads']));

    // Replay resumed: the replica catches up.
    await standby('SELECT pg_wal_replay_resume()');
    const caughtUp = await waitFor('the replica to catch up', async () => {
      const s = (await queue.stats()).find((q) => q.queue === QUEUE);
      return s?.done === 7 && s.pending === 0 ? s : null;
    });
    expect(caughtUp).toMatchObject({ done: 7, cancelled: 1, pending: 0, running: 0 });
  }, 60_000);
});
