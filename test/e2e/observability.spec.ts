import { Injectable } from '@nestjs/common';
import { NonRetryableError, QueueMetrics, TaskHandler, type Task } from '@app/pg-queue';
import { drainQueue } from '@app/pg-queue/testing';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

@Injectable()
class Work {
  @TaskHandler('obs.q', { mode: 'lease' })
  async run(task: Task<{ fail?: boolean }>) {
    if (task.payload.fail) throw new NonRetryableError('nope');
  }
}

describe('observability', () => {
  let db: TestDatabase;
  let qa: QueueApp;
  beforeAll(async () => {
    db = await createTestDatabase();
    qa = await bootQueueApp(db.prisma(), [Work], { autoStart: false });
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });

  it('exposes Prometheus metrics: outcomes and durations from events, queue depth from the database', async () => {
    await qa.queue.enqueueMany([{ queue: 'obs.q', payload: {} }, { queue: 'obs.q', payload: {} }, { queue: 'obs.q', payload: { fail: true } }]);
    await qa.queue.enqueue('obs.q', {}, { delayMs: 60_000 });
    await drainQueue(qa.app, 'obs.q');
    const text = await qa.app.get(QueueMetrics).metrics();
    expect(text).toContain('pgqueue_task_outcomes_total{queue="obs.q",outcome="completed"} 2');
    expect(text).toContain('pgqueue_task_outcomes_total{queue="obs.q",outcome="dead"} 1');
    expect(text).toContain('pgqueue_task_duration_seconds_count{queue="obs.q",outcome="completed"} 2');
    expect(text).toContain('pgqueue_tasks{queue="obs.q",state="done"} 2');
    expect(text).toContain('pgqueue_tasks{queue="obs.q",state="dead"} 1');
    expect(text).toContain('pgqueue_tasks{queue="obs.q",state="pending"} 1');
  });

  it('reports throughput and run time per hour (the seed query)', async () => {
    const hours = await qa.queue.hourly({ queue: 'obs.q' });
    expect(hours).toHaveLength(1);
    expect(hours[0]).toMatchObject({ queue: 'obs.q', done: 2 });
    expect(hours[0].avgMs).toBeGreaterThanOrEqual(0);
    expect(hours[0].hour.getUTCMinutes()).toBe(0);
  });
});
