import { Injectable, type OnModuleDestroy } from '@nestjs/common';
import { Gauge, Registry } from 'prom-client';
import { TaskQueue } from '../client/task-queue.service';
import { AttemptTally } from './attempt.tally';
import { TaskEvents } from './task-events';

/**
 * Prometheus metrics for the queue, on a registry of its own (merge it into yours, or serve
 * `metrics()` as is):
 * - `pgqueue_task_outcomes_total{queue, outcome}` from this process's task events;
 * - `pgqueue_task_duration_seconds{queue, outcome}` handler run time per attempt;
 * - `pgqueue_tasks{queue, state}` and `pgqueue_oldest_pending_seconds{queue}`, read from the
 *   database at scrape time (one query), so every instance reports the same queue-wide figures.
 *
 * @example
 * ```ts
 * @Get('metrics') async metrics(@Res() res: Response) {
 *   res.type(this.queueMetrics.contentType).send(await this.queueMetrics.metrics());
 * }
 * ```
 */
@Injectable()
export class QueueMetrics implements OnModuleDestroy {
  readonly registry = new Registry();
  private readonly stopCounting: () => void;

  constructor(queue: TaskQueue, events: TaskEvents) {
    const tally = new AttemptTally([0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120]);
    this.registry.registerMetric(
      tally.counter('pgqueue_task_outcomes_total', 'Finished attempts by outcome (completed, failed, dead, cancelled, released, lease-lost)'),
    );
    this.registry.registerMetric(tally.histogram('pgqueue_task_duration_seconds', 'Handler run time per attempt'));
    const tasks = new Gauge({
      name: 'pgqueue_tasks',
      help: 'Tasks by queue and state (done and cancelled: still in the archive)',
      labelNames: ['queue', 'state'],
      registers: [this.registry],
      collect: async () => {
        const stats = await queue.stats();
        tasks.reset();
        oldest.reset();
        for (const s of stats) {
          for (const state of ['pending', 'running', 'dead', 'done', 'cancelled'] as const) tasks.set({ queue: s.queue, state }, s[state]);
          oldest.set({ queue: s.queue }, (s.oldestPendingMs ?? 0) / 1000);
        }
      },
    });
    const oldest = new Gauge({
      name: 'pgqueue_oldest_pending_seconds',
      help: 'Age of the oldest task that is due and not started',
      labelNames: ['queue'],
      registers: [this.registry],
    });
    this.stopCounting = events.addCounter((type, queueName, durationMs) => {
      if (type !== 'claimed') tally.record(queueName, type, durationMs === undefined ? undefined : durationMs / 1000);
    });
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  metrics(): Promise<string> {
    return this.registry.metrics();
  }

  onModuleDestroy(): void {
    this.stopCounting();
  }
}
