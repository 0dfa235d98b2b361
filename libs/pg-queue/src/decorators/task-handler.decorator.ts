import { validateQueueName } from '../core/task-input';
import type { HandlerOptions } from '../pg-queue.options';
import type { SandboxOptions } from '../sandbox.options';
import type { ScheduleOptions } from '../schedules/schedule.definition';
import type { HandlerPayloadOf, LeaseTaskContext, Task, TaskContext } from '../types';

/**
 * Handler settings, plus an optional schedule that enqueues this queue's tasks periodically, the
 * PgQueueModule registration that runs it (`connection`, default 'default'; see
 * pg-queue.connections.ts), and `sandbox`: run the tasks in a worker thread or child process
 * instead of the method (lease mode only; see sandbox.options.ts).
 */
export type TaskHandlerOptions = Partial<HandlerOptions> & { schedule?: ScheduleOptions; connection?: string; sandbox?: SandboxOptions };

/** Metadata key under which @TaskHandler stores its arguments on the method. */
export const TASK_HANDLER_METADATA = 'pg-queue:task-handler';

/** Metadata key that marks a handler method as a workflow (set by @Workflow, see workflow/). */
export const WORKFLOW_METADATA = 'pg-queue:workflow';

export interface TaskHandlerMetadata {
  queue: string;
  options: TaskHandlerOptions;
}

/** A handler method of queue `Q` whose context is `C`: its task's payload follows the queue (see QueuePayloads). */
type HandlerMethod<Q extends string, C> = (task: Task<HandlerPayloadOf<Q>>, ctx: C) => unknown;

/** A method decorator that accepts only methods assignable to `M`: a mismatch is a compile error at the decorator. */
export type HandlerMethodDecorator<M> = <T extends M>(target: object, key: string | symbol, descriptor: TypedPropertyDescriptor<T>) => TypedPropertyDescriptor<T>;

/**
 * Marks a provider method as the handler of a queue. The module discovers it at startup and runs
 * it for every task of that queue.
 *
 * The handler's context follows the mode given here: `{ mode: 'lease' }` gives a
 * {@link LeaseTaskContext} (no `tx`), `{ mode: 'transactional' }` a {@link TaskContext}; a method
 * that declares the other one does not compile. Without `mode` in the decorator (it may come from
 * the module's `handlerDefaults` or `queues`), either is accepted.
 *
 * @example
 * ```ts
 * @Injectable()
 * export class OrderHandlers {
 *   @TaskHandler('order.confirm', { maxAttempts: 5 })
 *   async confirm(task: Task<{ orderId: number }>, ctx: TaskContext<Prisma.TransactionClient>) {
 *     await ctx.tx.order.update({ where: { id: task.payload.orderId }, data: { status: 'confirmed' } });
 *     await ctx.enqueue('payment.capture', { orderId: task.payload.orderId });
 *   }
 * }
 * ```
 * A periodic task: `@TaskHandler('reports.hourly', { schedule: { cron: '0 * * * *', tz: 'Europe/Berlin' } })`.
 * CPU-bound work off the event loop: `@TaskHandler('image.resize', { mode: 'lease', sandbox: { module: require.resolve('./resize.worker') } })`.
 */
export function TaskHandler<Q extends string>(queue: Q, options: TaskHandlerOptions & { mode: 'lease' }): HandlerMethodDecorator<HandlerMethod<Q, LeaseTaskContext>>;
export function TaskHandler<Q extends string>(queue: Q, options: TaskHandlerOptions & { mode: 'transactional' }): HandlerMethodDecorator<HandlerMethod<Q, TaskContext<any>>>;
export function TaskHandler<Q extends string>(queue: Q, options?: TaskHandlerOptions): HandlerMethodDecorator<HandlerMethod<Q, TaskContext<any>> | HandlerMethod<Q, LeaseTaskContext>>;
export function TaskHandler(queue: string, options: TaskHandlerOptions = {}): HandlerMethodDecorator<HandlerMethod<string, never>> {
  validateQueueName(queue);
  return (_target, _key, descriptor) => {
    const metadata: TaskHandlerMetadata = { queue, options };
    Reflect.defineMetadata(TASK_HANDLER_METADATA, metadata, descriptor.value!);
    return descriptor;
  };
}
