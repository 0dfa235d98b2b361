import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { Gauge, Registry } from 'prom-client';
import type { ResolvedModuleOptions } from '../pg-queue.options';
import { RESOLVED_OPTIONS } from '../pg-queue.tokens';
import { METRICS_COUNT_CAP } from '../sql/inspect.sql';
import { OperatorRepository } from '../sql/operator.repository';
import { AttemptTally } from './attempt.tally';
import { TaskEvents } from './task-events';

/**
 * Prometheus metrics for the queue, on a registry of its own (merge it into yours, or serve
 * `metrics()` as is):
 * - `pgqueue_task_outcomes_total{queue, outcome}` from this process's task events;
 * - `pgqueue_task_duration_seconds{queue, outcome}` handler run time per attempt;
 * - `pgqueue_tasks{queue, state}` (due, running, dead) and `pgqueue_oldest_pending_seconds{queue}`,
 *   read from the database at scrape time (one statement), so every instance reports the same
 *   queue-wide figures. The statement's cost does not grow with the archive or with delayed
 *   tasks (every scrape of every instance runs it): it counts neither, and stops counting due and
 *   dead tasks at METRICS_COUNT_CAP. `TaskQueue.stats()` has the exact counts of every state.
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

  /** Queues seen by an earlier scrape: reported at zero once the hot table no longer has them. */
  private readonly queues = new Set<string>();

  constructor(
    private readonly operator: OperatorRepository,
    @Inject(RESOLVED_OPTIONS) private readonly options: ResolvedModuleOptions,
    events: TaskEvents,
  ) {
    const tally = new AttemptTally([0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120]);
    this.registry.registerMetric(
      tally.counter('pgqueue_task_outcomes_total', 'Finished attempts by outcome (completed, failed, dead, cancelled, released, lease-lost)'),
    );
    this.registry.registerMetric(tally.histogram('pgqueue_task_duration_seconds', 'Handler run time per attempt'));
    // prom-client collects every metric at once and reads a gauge right after its own collect: both
    // gauges wait for the one statement of this scrape.
    let reading: Promise<void> | null = null;
    const collect = (): Promise<void> =>
      (reading ??= this.read(tasks, oldest).finally(() => {
        reading = null;
      }));
    const tasks: Gauge = new Gauge({
      name: 'pgqueue_tasks',
      help:
        `Tasks by queue and state: due (pending and due, not started), running, dead; due and dead are counted up to ${METRICS_COUNT_CAP}. ` +
        'Not counted: tasks not yet due, and finished ones (see pgqueue_task_outcomes_total)',
      labelNames: ['queue', 'state'],
      registers: [this.registry],
      collect,
    });
    const oldest: Gauge = new Gauge({
      name: 'pgqueue_oldest_pending_seconds',
      help: 'Age of the oldest task that is due and not started (0: none)',
      labelNames: ['queue'],
      registers: [this.registry],
      collect,
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

  private async read(tasks: Gauge, oldest: Gauge): Promise<void> {
    const rows = new Map((await this.operator.metrics(this.options.prisma)).map((r) => [r.queue, r]));
    for (const queue of rows.keys()) this.queues.add(queue);
    tasks.reset();
    oldest.reset();
    for (const queue of this.queues) {
      const r = rows.get(queue);
      tasks.set({ queue, state: 'due' }, r?.due ?? 0);
      tasks.set({ queue, state: 'running' }, r?.running ?? 0);
      tasks.set({ queue, state: 'dead' }, r?.dead ?? 0);
      oldest.set({ queue }, (r?.oldest_due_ms ?? 0) / 1000);
    }
  }
}
