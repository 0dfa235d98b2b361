import { Injectable } from '@nestjs/common';
import { TaskQueue } from '@app/pg-queue';
import { PrismaService } from '../prisma/prisma.service';

export interface CreateOrderDto {
  customer: string;
  amountCents: number;
}

@Injectable()
export class OrdersService {
  constructor(
    private readonly prisma: PrismaService,
    private readonly queue: TaskQueue,
  ) {}

  /**
   * The order and its confirmation task commit together, or neither does (outbox). The key makes
   * the confirmation unique per order however often it is requested.
   */
  async create(dto: CreateOrderDto) {
    return this.prisma.$transaction(async (tx) => {
      const order = await tx.order.create({ data: { customer: dto.customer, amountCents: dto.amountCents } });
      await this.queue.enqueue('order.confirm', { orderId: order.id }, { tx, key: `order-${order.id}` });
      return order;
    });
  }

  /**
   * Edits an order that is not paid yet and asks for (re)confirmation. With onConflict 'rerun', a
   * confirmation that is running right now runs once more afterwards and sees the new revision; a
   * pending one is simply replaced. Returns null when the order cannot be edited any more.
   */
  async edit(id: number, amountCents: number) {
    return this.prisma.$transaction(async (tx) => {
      const { count } = await tx.order.updateMany({
        where: { id, status: { in: ['new', 'confirmed'] } },
        data: { amountCents, revision: { increment: 1 } },
      });
      if (count === 0) return null;
      await this.queue.enqueue('order.confirm', { orderId: id }, { tx, key: `order-${id}`, onConflict: 'rerun' });
      return tx.order.findUnique({ where: { id } });
    });
  }

  find(id: number) {
    return this.prisma.order.findUnique({ where: { id }, include: { payment: true, emails: true } });
  }
}
