import { Controller, Get, Module } from '@nestjs/common';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { PgQueueHealthIndicator, PgQueueHealthModule } from '@app/pg-queue/health';

/** GET /health: 200 while the queue is healthy, 503 with the reasons otherwise. */
@Controller('health')
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly queue: PgQueueHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    // An email that waits a minute to be sent is an incident; the other queues have no limit. The
    // endpoint is public: it says what is wrong, not what the database said (the logs have that).
    return this.health.check([() => this.queue.isHealthy('queue', { maxOldestDueMs: { 'email.send': 60_000 }, errorText: false })]);
  }
}

@Module({ imports: [TerminusModule, PgQueueHealthModule], controllers: [HealthController] })
export class HealthModule {}
