/**
 * `@pg-queue/nestjs/metrics`: Prometheus metrics, an entry point of its own so that apps without
 * prom-client (an optional peer) never load it.
 */
export { PgQueueMetricsModule } from './pg-queue-metrics.module';
export { QueueMetrics } from './queue.metrics';
