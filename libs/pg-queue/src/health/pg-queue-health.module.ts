import { Module } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { PgQueueHealthIndicator } from './pg-queue.health-indicator';

/** Provides PgQueueHealthIndicator (needs PgQueueModule, which is global, in the same app). */
@Module({
  imports: [TerminusModule],
  providers: [PgQueueHealthIndicator],
  exports: [PgQueueHealthIndicator],
})
export class PgQueueHealthModule {}
