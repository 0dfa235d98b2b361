import { Module, type DynamicModule } from '@nestjs/common';
import { DEFAULT_CONNECTION, validateConnectionName } from '../pg-queue.connections';
import { METRICS_CONNECTION, QueueMetrics } from './queue.metrics';

/**
 * Provides QueueMetrics for the default PgQueueModule registration (needs it in the same app), or,
 * through `forRoot({ connection })`, for a named one (see pg-queue.connections.ts).
 */
@Module({ providers: [QueueMetrics], exports: [QueueMetrics] })
export class PgQueueMetricsModule {
  static forRoot({ connection = DEFAULT_CONNECTION }: { connection?: string } = {}): DynamicModule {
    return {
      module: PgQueueMetricsModule,
      providers: [{ provide: METRICS_CONNECTION, useValue: validateConnectionName(connection, 'connection', 'PgQueueMetricsModule.forRoot') }, QueueMetrics],
      exports: [QueueMetrics],
    };
  }
}
