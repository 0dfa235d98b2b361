import { Injectable, type OnModuleDestroy } from '@nestjs/common';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Subscription } from 'rxjs';
import { TaskQueue } from '../client/task-queue.service';
import type { TaskEvent } from '../types';

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
  private readonly subscription: Subscription;

  constructor(queue: TaskQueue) {
    const outcomes = new Counter({
      name: 'pgqueue_task_outcomes_total',
      help: 'Finished attempts by outcome (completed, failed, dead, cancelled, released, lease-lost)',
      labelNames: ['queue', 'outcome'],
      registers: [this.registry],
    });
    const durations = new Histogram({
      name: 'pgqueue_task_duration_seconds',
      help: 'Handler run time per attempt',
      labelNames: ['queue', 'outcome'],
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120],
      registers: [this.registry],
    });
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
    this.subscription = queue.events$.subscribe((e: TaskEvent) => {
      if (e.type === 'claimed') return;
      outcomes.inc({ queue: e.queue, outcome: e.type });
      if (e.durationMs !== undefined) durations.observe({ queue: e.queue, outcome: e.type }, e.durationMs / 1000);
    });
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  metrics(): Promise<string> {
    return this.registry.metrics();
  }

  onModuleDestroy(): void {
    this.subscription.unsubscribe();
  }
}
