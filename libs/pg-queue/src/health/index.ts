/**
 * `@pg-queue/nestjs/health`: the queue's `@nestjs/terminus` health indicator, an entry point of its
 * own so that apps without terminus (an optional peer) never load it.
 */
export { PgQueueHealthModule } from './pg-queue-health.module';
export { PgQueueHealthIndicator, type PgQueueHealthOptions } from './pg-queue.health-indicator';
