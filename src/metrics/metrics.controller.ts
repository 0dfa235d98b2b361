import { Controller, Get, Header } from '@nestjs/common';
import { QueueMetrics } from '@app/pg-queue/metrics';

/** Prometheus scrape endpoint for the queue's metrics. */
@Controller('metrics')
export class MetricsController {
  constructor(private readonly queueMetrics: QueueMetrics) {}

  @Get()
  @Header('content-type', 'text/plain; version=0.0.4; charset=utf-8')
  metrics(): Promise<string> {
    return this.queueMetrics.metrics();
  }
}
