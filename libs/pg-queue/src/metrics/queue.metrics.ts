import { Inject, Injectable, Optional, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { TaskEvents } from '../observability/task-events';
import { DEFAULT_CONNECTION, findRegistration } from '../pg-queue.connections';
import type { ResolvedModuleOptions } from '../pg-queue.options';
import { METRICS_COUNT_CAP } from '../sql/inspect.sql';
import { OperatorRepository } from '../sql/operator.repository';
import { registerFlowGauges } from './flow.metrics';

/** DI token of the registration QueueMetrics reports on (PgQueueMetricsModule.forRoot). */
export const METRICS_CONNECTION = Symbol('PG_QUEUE_METRICS_CONNECTION');

/** Run-time buckets of pgqueue_task_duration_seconds, in seconds. */
const DURATION_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120];

/**
 * Prometheus metrics for the queue, on a registry of its own (merge it into yours, or serve
 * `metrics()` as is). Provided by PgQueueMetricsModule (`@pg-queue/nestjs/metrics`), so an app
 * without metrics never loads prom-client (an optional peer):
 * - `pgqueue_task_outcomes_total{queue, outcome}` from this process's task events;
 * - `pgqueue_task_duration_seconds{queue, outcome}` handler run time per attempt;
 * - `pgqueue_tasks{queue, state}` (due, running, dead, waiting) and `pgqueue_oldest_due_seconds{queue}`
 *   (also as `pgqueue_oldest_pending_seconds`, its deprecated first name),
 *   and `pgqueue_queue_handlers{queue}` (running instances handling a queue with live tasks: 0 with
 *   due tasks is a queue nothing will run, such as a typo in a @TaskHandler queue name),
 *   and `pgqueue_queue_paused{queue}` (1 while paused as a whole, see TaskQueue.pause),
 *   and the back-off and named limiter gauges (flow.metrics.ts),
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
export class QueueMetrics implements OnModuleInit, OnModuleDestroy {
  readonly registry = new Registry();

  /** Queues seen by an earlier scrape: reported at zero once the hot table no longer has them. */
  private readonly queues = new Set<string>();

  /** The registration's options and its inspection statements (set by onModuleInit). */
  private source!: { options: ResolvedModuleOptions; operator: OperatorRepository };
  private stopCounting: () => void = () => undefined;
  private readonly outcomes: Counter;
  private readonly durations: Histogram;

  constructor(
    private readonly moduleRef: ModuleRef,
    @Optional() @Inject(METRICS_CONNECTION) private readonly connection: string = DEFAULT_CONNECTION,
  ) {
    const outcomes = new Counter({
      name: 'pgqueue_task_outcomes_total',
      help: 'Finished attempts by outcome (completed, failed, dead, cancelled, released, backed-off, lease-lost)',
      labelNames: ['queue', 'outcome'],
      registers: [this.registry],
    });
    const durations = new Histogram({
      name: 'pgqueue_task_duration_seconds',
      help: 'Handler run time per attempt',
      labelNames: ['queue', 'outcome'],
      buckets: DURATION_BUCKETS,
      registers: [this.registry],
    });
    // prom-client collects every metric at once and reads a gauge right after its own collect: both
    // gauges wait for the one statement of this scrape.
    let reading: Promise<void> | null = null;
    const collect = (): Promise<void> =>
      (reading ??= this.read(tasks, [oldest, oldestDeprecated], handlers, paused).finally(() => {
        reading = null;
      }));
    const tasks: Gauge = new Gauge({
      name: 'pgqueue_tasks',
      help:
        `Tasks by queue and state: due (pending and due, not started), running, dead, waiting (for their dependencies); due, dead and waiting are counted up to ${METRICS_COUNT_CAP}. ` +
        'Not counted: tasks not yet due, and finished ones (see pgqueue_task_outcomes_total)',
      labelNames: ['queue', 'state'],
      registers: [this.registry],
      collect,
    });
    const oldest: Gauge = new Gauge({
      name: 'pgqueue_oldest_due_seconds',
      help: 'Age of the oldest task that is due and not started (0: none)',
      labelNames: ['queue'],
      registers: [this.registry],
      collect,
    });
    // The same figure under its first name, kept so that existing dashboards and alerts still read it.
    const oldestDeprecated: Gauge = new Gauge({
      name: 'pgqueue_oldest_pending_seconds',
      help: 'Deprecated: pgqueue_oldest_due_seconds under its former name',
      labelNames: ['queue'],
      registers: [this.registry],
      collect,
    });
    const handlers: Gauge = new Gauge({
      name: 'pgqueue_queue_handlers',
      help:
        'Running instances that handle the queue (with autoStart), per queue with live tasks. 0 with due tasks: ' +
        'nothing will run them (a typo in a @TaskHandler queue name, or no worker deployed)',
      labelNames: ['queue'],
      registers: [this.registry],
      collect,
    });
    const paused: Gauge = new Gauge({
      name: 'pgqueue_queue_paused',
      help: '1 while the queue is paused as a whole (TaskQueue.pause: nothing of it is claimed), else 0; per queue with live tasks or a pause',
      labelNames: ['queue'],
      registers: [this.registry],
      collect,
    });
    registerFlowGauges(this.registry, () => this.source.options);
    this.outcomes = outcomes;
    this.durations = durations;
  }

  /** Finds the registration it reports on (a PgQueueError when the app has none of that name). */
  onModuleInit(): void {
    const options = findRegistration<ResolvedModuleOptions>(this.moduleRef, this.connection, 'options', 'QueueMetrics');
    const events = findRegistration<TaskEvents>(this.moduleRef, this.connection, 'events', 'QueueMetrics');
    this.source = { options, operator: new OperatorRepository(options.schema) };
    const { outcomes, durations } = this;
    // One labelled child per (queue, outcome), looked up once: no label lookup per finished
    // attempt.
    const series = new Map<string, { count: Counter.Internal; duration: Histogram.Internal<'queue' | 'outcome'> }>();
    this.stopCounting = events.addCounter((type, queue, durationMs) => {
      if (type === 'claimed') return;
      const key = `${queue}\u0000${type}`;
      let s = series.get(key);
      if (!s) {
        s = { count: outcomes.labels({ queue, outcome: type }), duration: durations.labels({ queue, outcome: type }) };
        series.set(key, s);
      }
      s.count.inc();
      if (durationMs !== undefined) s.duration.observe(durationMs / 1000);
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

  private async read(tasks: Gauge, oldest: Gauge[], handlers: Gauge, paused: Gauge): Promise<void> {
    // From the replica when the app gives one (readPrisma): scrapes never compete with claims.
    const rows = new Map((await this.source.operator.metrics(this.source.options.readPrisma)).map((r) => [r.queue, r]));
    for (const queue of rows.keys()) this.queues.add(queue);
    tasks.reset();
    for (const g of oldest) g.reset();
    handlers.reset(); // only for queues with live tasks: a queue that has none has no series
    for (const r of rows.values()) handlers.set({ queue: r.queue }, r.handlers);
    paused.reset();
    for (const queue of this.queues) {
      const r = rows.get(queue);
      tasks.set({ queue, state: 'due' }, r?.due ?? 0);
      tasks.set({ queue, state: 'running' }, r?.running ?? 0);
      tasks.set({ queue, state: 'dead' }, r?.dead ?? 0);
      tasks.set({ queue, state: 'waiting' }, r?.waiting ?? 0);
      for (const g of oldest) g.set({ queue }, (r?.oldest_due_ms ?? 0) / 1000);
      paused.set({ queue }, r?.paused ? 1 : 0);
    }
  }
}
