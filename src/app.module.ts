import { Module } from '@nestjs/common';
import { PgQueueDashboardModule, PgQueueModule } from '@app/pg-queue';
import { DashboardTokenGuard } from './dashboard/dashboard-token.guard';
import { EmailHandlers } from './emails/email.handlers';
import { HealthModule } from './health/health.module';
import { PgQueueMetricsModule } from '@app/pg-queue/metrics';
import { MetricsController } from './metrics/metrics.controller';
import { FulfilmentWorkflow } from './orders/fulfilment.workflow';
import { OrderHandlers } from './orders/order.handlers';
import { OrdersController } from './orders/orders.controller';
import { OrdersService } from './orders/orders.service';
import { PaymentGateway } from './payments/payment-gateway';
import { PaymentHandlers } from './payments/payment.handlers';
import { PrismaModule } from './prisma/prisma.module';
import { PrismaService } from './prisma/prisma.service';
import { ReportHandlers } from './reports/report.handlers';

/** Orders → payment → email, each step a queue task; delivery orders as a workflow (charge → reserve → delivered or refund); plus an hourly report. */
@Module({
  imports: [
    PrismaModule,
    PgQueueModule.forRootAsync({
      inject: [PrismaService],
      useFactory: (prisma: PrismaService) => ({
        prisma,
        databaseUrl: process.env.DATABASE_URL,
        autoStart: process.env.PGQUEUE_AUTOSTART !== 'false',
        // One budget for every queue that calls the payment provider (payment.capture here; a
        // refund queue would name it too), and one back-off when it answers 429.
        limiters: { gateway: { concurrency: 40 } },
      }),
    }),
    HealthModule,
    PgQueueMetricsModule,
    // The queue dashboard at /queues, behind the example's token guard (see DashboardTokenGuard).
    PgQueueDashboardModule.forRoot({ path: '/queues', guard: DashboardTokenGuard }),
  ],
  controllers: [OrdersController, MetricsController],
  providers: [OrdersService, PaymentGateway, OrderHandlers, PaymentHandlers, EmailHandlers, ReportHandlers, FulfilmentWorkflow],
})
export class AppModule {}
