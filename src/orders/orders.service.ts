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

  /** The order and its confirmation task commit together, or neither does (outbox). */
  async create(dto: CreateOrderDto) {
    return this.prisma.$transaction(async (tx) => {
      const order = await tx.order.create({ data: { customer: dto.customer, amountCents: dto.amountCents } });
      await this.queue.enqueue('order.confirm', { orderId: order.id }, { tx });
      return order;
    });
  }

  find(id: number) {
    return this.prisma.order.findUnique({ where: { id }, include: { payment: true, emails: true } });
  }
}
