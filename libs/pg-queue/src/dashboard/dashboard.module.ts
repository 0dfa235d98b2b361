import { Module } from '@nestjs/common';
import { DashboardData } from './dashboard.data';
import { DashboardModuleClass, PG_QUEUE_DASHBOARD_OPTIONS } from './dashboard.module-definition';
import { resolveDashboardOptions, type PgQueueDashboardOptions } from './dashboard.options';
import { DASHBOARD_OPTIONS } from './dashboard.tokens';

/**
 * The queue's web dashboard, served by your Nest app: queues overview, task list, task detail
 * with its pipeline, schedules, and the operator actions (retry, cancel, retry dead, priority, run now, reschedule, replace payload).
 * Off unless imported. Needs PgQueueModule in the same app (global by default) and, for the
 * actions' forms, Nest's default body parser.
 *
 * @example
 * ```ts
 * @Module({
 *   imports: [
 *     PgQueueModule.forRootAsync({ ... }),
 *     PgQueueDashboardModule.forRoot({ path: '/queues', guard: AdminGuard }),
 *   ],
 * })
 * export class AppModule {}
 * ```
 */
@Module({
  providers: [
    {
      provide: DASHBOARD_OPTIONS,
      inject: [PG_QUEUE_DASHBOARD_OPTIONS],
      useFactory: (options: PgQueueDashboardOptions) => resolveDashboardOptions(options),
    },
    DashboardData,
  ],
})
export class PgQueueDashboardModule extends DashboardModuleClass {}
