import { validateQueueName } from '../client/task-input';
import type { HandlerOptions } from '../pg-queue.options';

/** Metadata key under which @TaskHandler stores its arguments on the method. */
export const TASK_HANDLER_METADATA = 'pg-queue:task-handler';

export interface TaskHandlerMetadata {
  queue: string;
  options: Partial<HandlerOptions>;
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
 */
export function TaskHandler(queue: string, options: Partial<HandlerOptions> = {}): MethodDecorator {
  validateQueueName(queue);
  return (_target, _key, descriptor: PropertyDescriptor) => {
    const metadata: TaskHandlerMetadata = { queue, options };
    Reflect.defineMetadata(TASK_HANDLER_METADATA, metadata, descriptor.value);
    return descriptor;
  };
}
