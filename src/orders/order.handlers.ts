import { Injectable } from '@nestjs/common';
import { NonRetryableError, TaskHandler, type Task, type TaskContext } from '@app/pg-queue';
import type { Prisma } from '../generated/prisma/client';

export interface ConfirmOrder {
  orderId: number;
}

@Injectable()
export class OrderHandlers {
  /** Transactional: the status change and the payment task commit with the completion, exactly once. */
  @TaskHandler('order.confirm', { concurrency: 4, batchSize: 20, maxAttempts: 5 })
  async confirm(task: Task<ConfirmOrder>, ctx: TaskContext<Prisma.TransactionClient>): Promise<void> {
    const order = await ctx.tx.order.findUnique({ where: { id: task.payload.orderId } });
    if (!order) throw new NonRetryableError(`order ${task.payload.orderId} does not exist`);
    if (order.status !== 'new') return; // already confirmed by an earlier committed attempt
    await ctx.tx.order.update({ where: { id: order.id }, data: { status: 'confirmed', confirmedAt: new Date() } });
    await ctx.enqueue('payment.capture', { orderId: order.id, amountCents: order.amountCents });
  }
}
