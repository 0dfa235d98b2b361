import { Injectable } from '@nestjs/common';
import { NonRetryableError, TaskHandler, type Task, type TaskContext } from '@app/pg-queue';
import type { Prisma } from '../generated/prisma/client';

export interface ConfirmOrder {
  orderId: number;
}

@Injectable()
export class OrderHandlers {
  /**
   * Transactional: the confirmation and the payment task commit with the completion, exactly once.
   * An edit re-runs it (see OrdersService.edit): it then confirms the newest revision, and the
   * payment, queued per customer so one customer's charges never run concurrently, reads the
   * amount when it runs.
   */
  @TaskHandler('order.confirm', { concurrency: 4, batchSize: 20, maxAttempts: 5 })
  async confirm(task: Task<ConfirmOrder>, ctx: TaskContext<Prisma.TransactionClient>): Promise<void> {
    const order = await ctx.tx.order.findUnique({ where: { id: task.payload.orderId } });
    if (!order) throw new NonRetryableError(`order ${task.payload.orderId} does not exist`);
    if (order.status !== 'new' && order.status !== 'confirmed') return; // paid already: nothing to confirm
    await ctx.tx.order.update({
      where: { id: order.id },
      data: { status: 'confirmed', confirmedAt: new Date(), confirmedRevision: order.revision },
    });
    if (order.status === 'new') {
      await ctx.enqueue('payment.capture', { orderId: order.id }, { group: `customer-${order.customer}` });
    }
  }
}
