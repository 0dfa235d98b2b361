/**
 * PgQueueHealthIndicator behind a real `/health` route (@nestjs/terminus): up when the database
 * answers, LISTEN is connected (or poll-only by configuration) and every worker loop runs; down,
 * with the reason, when a queue's oldest due task waited past its limit, the database stops
 * answering (a stalled TCP path), LISTEN is lost, or the workers stopped.
 */
import { Controller, Get, Injectable, Module, type INestApplication } from '@nestjs/common';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { Test } from '@nestjs/testing';
import { PrismaPg } from '@prisma/adapter-pg';
import { PgQueueModule, TaskHandler, TaskQueue, WorkerOrchestrator, type LeaseTaskContext, type PgQueueModuleOptions, type Task } from '@app/pg-queue';
import { PgQueueHealthIndicator, PgQueueHealthModule, type PgQueueHealthOptions } from '@app/pg-queue/health';
import { PrismaClient } from '../../src/generated/prisma/client';
import { StallProxy } from '../support/stall-proxy';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';
import { portNobodyListensOn } from '../support/free-port';

/** What the route passes to the indicator; each test sets what it checks. */
const checkOptions: { current: PgQueueHealthOptions } = { current: {} };

@Controller('health')
class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly queue: PgQueueHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    return this.health.check([() => this.queue.isHealthy('queue', checkOptions.current)]);
  }
}

@Module({ imports: [TerminusModule, PgQueueHealthModule], controllers: [HealthController] })
class HealthModule {}

@Injectable()
class HealthHandlers {
  @TaskHandler('health.work', { mode: 'lease' })
  async work(_task: Task, _ctx: LeaseTaskContext) {}
}


interface Health {
  status: number;
  body: { status: string; info?: Record<string, any>; error?: Record<string, any> };
}

describe('PgQueueHealthIndicator (terminus) on /health', () => {
  let db: TestDatabase;
  const apps: INestApplication[] = [];
  const clients: PrismaClient[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    for (const app of apps) await app.close().catch(() => undefined);
    for (const c of clients) await c.$disconnect().catch(() => undefined);
    await db.drop();
  });
  beforeEach(() => {
    checkOptions.current = {};
  });

  async function serve(prismaUrl: string, options: Partial<PgQueueModuleOptions>) {
    const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: prismaUrl, max: 4 }) });
    clients.push(prisma);
    const moduleRef = await Test.createTestingModule({
      imports: [PgQueueModule.forRoot({ prisma, pollIntervalMs: 200, shutdownTimeoutMs: 2000, ...options }), HealthModule],
      providers: [HealthHandlers],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    apps.push(app);
    await app.listen(0, '127.0.0.1');
    const url = await app.getUrl();
    const get = async (): Promise<Health> => {
      const res = await fetch(`${url}/health`);
      return { status: res.status, body: (await res.json()) as Health['body'] };
    };
    return { app, get };
  }

  describe('an app whose pool goes through a TCP proxy that can stall, with LISTEN direct', () => {
    let proxy: StallProxy;
    let app: INestApplication;
    let get: () => Promise<Health>;

    beforeAll(async () => {
      proxy = new StallProxy(Number(new URL(db.url).port));
      await proxy.start();
      ({ app, get } = await serve(proxy.url(db.url), { databaseUrl: db.url }));
      await waitFor('LISTEN to connect', () => app.get(WorkerOrchestrator).listening);
    });
    afterAll(async () => {
      proxy.resume();
      await proxy.close();
    });

    it('is up with every check listed when all is well', async () => {
      const res = await get();
      expect(res.status).toBe(200);
      expect(res.body.info?.queue).toMatchObject({
        status: 'up',
        database: 'up',
        listen: 'connected',
        workers: [{ queue: 'health.work', alive: true, state: 'running', running: 0, lastClaimError: null }],
      });
    });

    it('is down when a queue\'s oldest due task waited past its limit, and up again once it is gone', async () => {
      // A queue no process here handles: its task waits.
      const id = await app.get(TaskQueue).enqueue('health.orphan', {});
      checkOptions.current = { maxOldestDueMs: { 'health.orphan': 300 } };
      const down = await waitFor('the limit to pass', async () => {
        const res = await get();
        return res.status === 503 ? res : null;
      });
      expect(down.body.error?.queue.problems).toEqual([expect.stringMatching(/^queue "health\.orphan": its oldest due task has waited \d+ ms \(limit 300\)$/)]);
      expect(down.body.error?.queue.queues).toEqual([expect.objectContaining({ queue: 'health.orphan', due: 1 })]);
      await db.sql('DELETE FROM pgqueue.task WHERE id = $1', [id]);
      expect((await get()).status).toBe(200);
      // The same limit for every queue as one number
      checkOptions.current = { maxOldestDueMs: 0 };
      expect((await get()).status).toBe(200); // nothing due at all
    });

    it('is down, within its timeout, when the database stops answering', async () => {
      checkOptions.current = { timeoutMs: 500 };
      proxy.stall();
      try {
        const res = await get();
        expect({ status: res.status, problems: res.body.error?.queue.problems }).toEqual({ status: 503, problems: ['database: no answer within 500 ms'] });
      } finally {
        proxy.resume();
      }
      await waitFor('the database to answer again', async () => (await get()).status === 200);
    });

    it('is down once the workers stopped (shutdown)', async () => {
      await app.get(WorkerOrchestrator).shutdown();
      const res = await get();
      expect({ status: res.status, problems: res.body.error?.queue.problems }).toEqual({ status: 503, problems: ['worker "health.work": stopped'] });
    });
  });

  it('is down while LISTEN is configured but cannot connect; up in poll-only mode', async () => {
    const port = await portNobodyListensOn();
    const broken = await serve(db.url, { databaseUrl: `postgresql://postgres@127.0.0.1:${port}/postgres` });
    const res = await broken.get();
    expect({ status: res.status, problems: res.body.error?.queue.problems, listen: res.body.error?.queue.listen }).toEqual({
      status: 503,
      problems: ['LISTEN connection lost (workers poll until it is back)'],
      listen: 'disconnected',
    });
    await broken.app.close();

    const pollOnly = await serve(db.url, {});
    const ok = await pollOnly.get();
    expect({ status: ok.status, listen: ok.body.info?.queue.listen }).toEqual({ status: 200, listen: 'poll-only' });
    await pollOnly.app.close();

    // An API-only process (autoStart: false) runs no worker and no listener: nothing to be down.
    const apiOnly = await serve(db.url, { databaseUrl: db.url, autoStart: false });
    const api = await apiOnly.get();
    expect({ status: api.status, listen: api.body.info?.queue.listen, workers: api.body.info?.queue.workers }).toEqual({ status: 200, listen: 'off', workers: [] });
  });

  it('refuses bad thresholds with a typed error', async () => {
    const indicator = apps[0].get(PgQueueHealthIndicator);
    await expect(indicator.isHealthy('q', { maxOldestDueMs: -1 })).rejects.toThrow(/invalid argument "maxOldestDueMs"/);
    await expect(indicator.isHealthy('q', { maxOldestDueMs: { a: Number.NaN } })).rejects.toThrow(/invalid argument "maxOldestDueMs\["a"\]"/);
    await expect(indicator.isHealthy('q', { timeoutMs: 0 })).rejects.toThrow(/invalid argument "timeoutMs"/);
  });
});
