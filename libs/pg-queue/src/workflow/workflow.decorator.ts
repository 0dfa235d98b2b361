import { TaskHandler, WORKFLOW_METADATA, type HandlerMethodDecorator, type TaskHandlerOptions } from '../decorators/task-handler.decorator';
import type { HandlerPayloadOf } from '../types';
import type { WorkflowContext } from './workflow.api';

/** `@Workflow` options: a lease-mode handler's (the mode is always lease; no sandbox: its steps need this process). */
export type WorkflowOptions = Omit<TaskHandlerOptions, 'mode' | 'sandbox'>;

type WorkflowMethod<Q extends string> = (input: HandlerPayloadOf<Q>, wf: WorkflowContext<any>) => unknown;

/**
 * Marks a provider method as the workflow of queue `queue`: it runs for every task of that queue
 * with the task's payload as its input and a {@link WorkflowContext}, and what it returns is the
 * task's result. Everything a task has applies: `{ tx }` enqueue, keys, partitions, limits, retries
 * (`maxAttempts`: attempts that fail, not parks), metrics, the dashboard.
 *
 * @example
 * ```ts
 * @Workflow('order.fulfil', { maxAttempts: 20 })
 * async fulfil(input: { orderId: number }, wf: WorkflowContext<Prisma.TransactionClient>) {
 *   const charge = await wf.step('charge', () => this.gateway.charge(input.orderId, { idempotencyKey: wf.stepKey('charge') }));
 *   await wf.transaction('reserve', (tx) => tx.stock.update({ ... }));
 * }
 * ```
 */
export function Workflow<Q extends string>(queue: Q, options: WorkflowOptions = {}): HandlerMethodDecorator<WorkflowMethod<Q>> {
  const asHandler = TaskHandler(queue, { ...options, mode: 'lease' }) as unknown as HandlerMethodDecorator<WorkflowMethod<Q>>;
  return (target, key, descriptor) => {
    Reflect.defineMetadata(WORKFLOW_METADATA, true, descriptor.value!);
    return asHandler(target, key, descriptor);
  };
}
