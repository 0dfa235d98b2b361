import { validateQueueName } from '../core/task-input';
import type { HandlerOptions } from '../pg-queue.options';
import type { ScheduleOptions } from '../schedules/schedule.definition';

/** Handler settings, plus an optional schedule that enqueues this queue's tasks periodically. */
export type TaskHandlerOptions = Partial<HandlerOptions> & { schedule?: ScheduleOptions };

/** Metadata key under which @TaskHandler stores its arguments on the method. */
export const TASK_HANDLER_METADATA = 'pg-queue:task-handler';

export interface TaskHandlerMetadata {
  queue: string;
  options: TaskHandlerOptions;
}

/**
 * Marks a provider method as the handler of a queue. The module discovers it at startup and runs
 * it for every task of that queue.
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
 */
export function TaskHandler(queue: string, options: TaskHandlerOptions = {}): MethodDecorator {
  validateQueueName(queue);
  return (_target, _key, descriptor: PropertyDescriptor) => {
    const metadata: TaskHandlerMetadata = { queue, options };
    Reflect.defineMetadata(TASK_HANDLER_METADATA, metadata, descriptor.value);
    return descriptor;
  };
}
