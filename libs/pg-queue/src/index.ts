export { PgQueueModule } from './pg-queue.module';
export { DEFAULT_CONNECTION, InjectTaskQueue, getTaskQueueToken } from './pg-queue.connections';
export { PG_QUEUE_OPTIONS } from './pg-queue.module-definition';
export { DEFAULT_HANDLER_OPTIONS, type HandlerOptions, type PgQueueModuleOptions, type RateLimit } from './pg-queue.options';
export { TaskHandler, TASK_HANDLER_METADATA, type HandlerMethodDecorator, type TaskHandlerOptions } from './decorators/task-handler.decorator';
export type { ScheduleDefinition, ScheduleOptions } from './schedules/schedule.definition';
export type { SandboxContext, SandboxedHandler, SandboxOptions } from './sandbox.options';
export { TaskQueue } from './client/task-queue.service';
export { Workflow, type WorkflowOptions } from './workflow/workflow.decorator';
export type { StepOptions, TransactionStepOptions, WorkflowContext } from './workflow/workflow.api';
export { ChildWorkflowError, SignalTargetError, StepFailedError, StepTimeoutError, WorkflowDefinitionError, WorkflowReplayError } from './workflow/workflow.errors';
export type { WorkflowInfo, WorkflowStepInfo, WorkflowWait } from './workflow/workflow.types';
export { PgQueueDashboardModule } from './dashboard/dashboard.module';
export { dashboardBasicAuth } from './dashboard/dashboard.basic-auth';
export type { DashboardGuard, PgQueueDashboardExtras, PgQueueDashboardOptions } from './dashboard/dashboard.options';
export { TaskHandlerRegistry, type RegisteredHandler } from './discovery/task-handler.registry';
export { TaskEvents } from './observability/task-events';
export { WorkerOrchestrator } from './worker/worker.orchestrator';
export { printSchemaSql } from './sql/schema.sql';
export { queueStatementName } from './sql/statement-names';
export type { CancelResult, PauseScope } from './client/task-queue.service';
export type { RuntimeScheduleOptions, ScheduleInfo } from './client/schedules.client';
export type { QueuePause } from './sql/pause.repository';
export type { BackOffInForce, Cooldown } from './sql/backoff.repository';
export type { LimiterBudget } from './sql/limiter.repository';
export type { LimiterOptions } from './limiter.options';
export type { WaitForOptions, WatchFilter, WatchedTaskEvent } from './client/task-waiter';
export type { RescheduleTo, TaskChangeResult } from './client/task-changes';
export * from './errors';
export type {
  BackoffOptions,
  ChainStage,
  EnqueueItem,
  EnqueueItemOf,
  EnqueueOptions,
  DebounceOptions,
  DependsOn,
  FollowUpRef,
  FollowUpOptions,
  HandlerMode,
  PrismaClientLike,
  QueueStats,
  SqlExecutor,
  HandlerPayloadOf,
  PayloadOf,
  QueuePayloads,
  Task,
  TaskInfo,
  TaskLogEntry,
  TaskState,
  AnyTaskContext,
  LeaseTaskContext,
  TaskContext,
  TaskContextBase,
  TaskEvent,
  TaskHandlerFn,
} from './types';
