/**
 * A queue with due tasks that no running instance handles (issue 23, item 3): a typo in a
 * @TaskHandler queue name, or no worker deployed. Before, the producer's tasks stayed pending with
 * no sign anywhere; now the running instances say so in their logs, the metrics scrape has the
 * number of live instances handling each queue, health goes down past `maxUnhandledMs`, and the
 * dashboard's overview marks the queue. Two apps on one database: a producer without handlers, and
 * a worker handling 'real.queue' only.
 */
import { Injectable, Logger } from '@nestjs/common';
import { TaskHandler, type LeaseTaskContext, type Task } from '@app/pg-queue';
import { PgQueueMetricsModule, QueueMetrics } from '@app/pg-queue/metrics';
import { PgQueueHealthIndicator, PgQueueHealthModule } from '@app/pg-queue/health';
import { PgQueueDashboardModule } from '../../libs/pg-queue/src/dashboard/dashboard.module';
import { DashboardData } from '../../libs/pg-queue/src/dashboard/dashboard.data';
import { bootQueueApp, deferred, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

const gate = deferred();

@Injectable()
class RealHandler {
  /** Holds its task until the test ends, or until shutdown aborts it: real.queue keeps due tasks. */
  @TaskHandler('real.queue', { mode: 'lease' })
  async handle(_task: Task, ctx: LeaseTaskContext) {
    await Promise.race([gate.promise, new Promise((resolve) => ctx.signal.addEventListener('abort', resolve))]);
  }
}

describe('a queue with due tasks and no running instance handling it', () => {
  let db: TestDatabase;
  let producer: QueueApp;
  let worker: QueueApp;
  let warn: jest.SpyInstance;
  const warnings = (queue: string) => warn.mock.calls.map(([m]) => String(m)).filter((m) => m.includes(`queue "${queue}" has`));
  const scrape = () => producer.app.get(QueueMetrics).metrics();
  const health = (maxUnhandledMs: number) => producer.app.get(PgQueueHealthIndicator).isHealthy('queue', { maxUnhandledMs });
  const overviewRow = async (queue: string) => (await producer.app.get(DashboardData).overview()).queues.find((q) => q.queue === queue);

  beforeAll(async () => {
    db = await createTestDatabase();
    warn = jest.spyOn(Logger.prototype, 'warn');
    producer = await bootQueueApp(db.prisma(4), [], { workerId: 'producer', rescueIntervalMs: 300 }, [
      PgQueueMetricsModule,
      PgQueueHealthModule,
      PgQueueDashboardModule.forRoot({ guard: 'none' }),
    ]);
    await producer.queue.enqueueMany([
      { queue: 'typo.queue', payload: { n: 1 } },
      { queue: 'typo.queue', payload: { n: 2 } },
      ...[1, 2, 3].map((n) => ({ queue: 'real.queue', payload: { n } })),
    ]);
    worker = await bootQueueApp(db.prisma(4), [RealHandler], {
      workerId: 'worker',
      rescueIntervalMs: 300,
      shutdownTimeoutMs: 500,
      queues: { 'real.queue': { concurrency: 1 } },
    });
  });
  afterAll(async () => {
    gate.resolve();
    warn.mockRestore();
    await worker?.close();
    await producer?.close();
    await db.drop();
  });

  it('the logs, the metrics, health past maxUnhandledMs and the overview name the unhandled queue only', async () => {
    await waitFor('a warning naming typo.queue', () => warnings('typo.queue').length > 0, { timeoutMs: 30_000 });
    expect(warnings('typo.queue')[0]).toMatch(/queue "typo.queue" has 2 due tasks and no running instance handles it/);
    await waitFor('real.queue to run a task', async () => (await scrape()).includes('pgqueue_tasks{queue="real.queue",state="running"} 1'));

    const text = await waitFor('the handlers in the metrics', async () => {
      const t = await scrape();
      return t.includes('pgqueue_queue_handlers{queue="real.queue"} 1') ? t : null;
    });
    expect(text).toContain('pgqueue_queue_handlers{queue="typo.queue"} 0');

    const down = await waitFor('health down with maxUnhandledMs: 1', async () => {
      const h = await health(1);
      return h.queue.status === 'down' ? h.queue : null;
    });
    const problems: string[] = down.problems;
    expect(problems).toEqual([expect.stringMatching(/^queue "typo.queue": 2 due tasks and no running instance has handled it for \d+ ms \(limit 1\)$/)]);
    // A generous threshold: not yet.
    expect((await health(3_600_000)).queue.status).toBe('up');

    expect(await overviewRow('typo.queue')).toMatchObject({ due: 2, handlers: 0, unhandledMs: expect.any(Number) });
    expect(await overviewRow('real.queue')).toMatchObject({ handlers: 1, unhandledMs: null });
    expect(warnings('real.queue')).toEqual([]);
  });

  it('once the handling instance has closed, its queue is unhandled too', async () => {
    await worker.close(); // aborts the held task: real.queue keeps 3 due tasks
    await waitFor('real.queue without handlers in the metrics', async () => (await scrape()).includes('pgqueue_queue_handlers{queue="real.queue"} 0'), {
      timeoutMs: 30_000,
    });
    expect(await overviewRow('real.queue')).toMatchObject({ due: 3, handlers: 0, unhandledMs: expect.any(Number) });
    await waitFor('health to name real.queue', async () => {
      const h = await health(1);
      return ((h.queue.problems as string[] | undefined) ?? []).some((p) => p.startsWith('queue "real.queue": 3 due tasks'));
    });
    await waitFor('a warning naming real.queue', () => warnings('real.queue').length > 0, { timeoutMs: 30_000 });
  });
});
