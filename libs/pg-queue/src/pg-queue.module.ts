import { Module } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { TaskQueue } from './client/task-queue.service';
import { TaskHandlerExplorer } from './discovery/task-handler.explorer';
import { TaskHandlerRegistry } from './discovery/task-handler.registry';
import { TaskEvents } from './observability/task-events';
import { ConfigurableModuleClass, PG_QUEUE_OPTIONS } from './pg-queue.module-definition';
import { type PgQueueModuleOptions, type ResolvedModuleOptions, resolveModuleOptions } from './pg-queue.options';
import { RESOLVED_OPTIONS } from './pg-queue.tokens';
import { OperatorRepository } from './sql/operator.repository';
import { ScheduleRepository } from './sql/schedule.repository';
import { TaskRepository } from './sql/task.repository';
import { WorkerOrchestrator } from './worker/worker.orchestrator';

/**
 * The queue for a Nest + Prisma app.
 *
 * @example
 * ```ts
 * @Module({
 *   imports: [
 *     PgQueueModule.forRootAsync({
 *       imports: [PrismaModule],
 *       inject: [PrismaService],
 *       useFactory: (prisma: PrismaService) => ({ prisma, databaseUrl: process.env.DATABASE_URL }),
 *     }),
 *   ],
 *   providers: [OrderHandlers],
 * })
 * export class AppModule {}
 * ```
 * Global by default (`isGlobal: true`): TaskQueue can be injected anywhere. Queues in another
 * database: a second registration with `connection: 'name'` (see pg-queue.connections.ts).
 */
@Module({
  imports: [DiscoveryModule],
  providers: [
    {
      provide: RESOLVED_OPTIONS,
      inject: [PG_QUEUE_OPTIONS],
      useFactory: (options: PgQueueModuleOptions) => resolveModuleOptions(options),
    },
    {
      provide: TaskRepository,
      inject: [RESOLVED_OPTIONS],
      useFactory: (options: ResolvedModuleOptions) => new TaskRepository(options.schema, options.finished),
    },
    {
      provide: OperatorRepository,
      inject: [RESOLVED_OPTIONS],
      useFactory: (options: ResolvedModuleOptions) => new OperatorRepository(options.schema),
    },
    {
      provide: ScheduleRepository,
      inject: [RESOLVED_OPTIONS],
      useFactory: (options: ResolvedModuleOptions) => new ScheduleRepository(options.schema),
    },
    TaskHandlerRegistry,
    TaskHandlerExplorer,
    TaskEvents,
    TaskQueue,
    WorkerOrchestrator,
  ],
  // Exports depend on the registration's name: see pg-queue.module-definition.ts.
})
export class PgQueueModule extends ConfigurableModuleClass {}
