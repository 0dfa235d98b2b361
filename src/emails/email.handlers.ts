import { Injectable } from '@nestjs/common';
import { TaskHandler, type Task, type TaskContext } from '@app/pg-queue';
import type { Prisma } from '../generated/prisma/client';

export interface SendEmail {
  orderId: number;
  kind: string;
  chargeId: string;
}

@Injectable()
export class EmailHandlers {
  /** Records the receipt as sent and closes the order, in the completion's transaction. */
  @TaskHandler('email.send', { concurrency: 4, batchSize: 20 })
  async send(task: Task<SendEmail>, ctx: TaskContext<Prisma.TransactionClient>): Promise<void> {
    const { orderId, kind } = task.payload;
    await ctx.tx.email.create({ data: { orderId, kind } });
    await ctx.tx.order.update({ where: { id: orderId }, data: { status: 'completed' } });
  }
}
