import { Module } from '@nestjs/common';
import { QueueMetrics } from './queue.metrics';

/** Provides QueueMetrics (needs PgQueueModule, which is global, in the same app). */
@Module({ providers: [QueueMetrics], exports: [QueueMetrics] })
export class PgQueueMetricsModule {}
