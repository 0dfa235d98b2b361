import { Injectable } from '@nestjs/common';
import { SignalTargetError, TaskQueue } from '@app/pg-queue';
import { PrismaService } from '../prisma/prisma.service';
import type { Delivered } from './fulfilment.workflow';

export interface CreateOrderDto {
  customer: string;
  amountCents: number;
  /** A delivery order: runs the order.fulfil workflow (charge, reserve, wait for delivery or refund). */
  delivery?: boolean;
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
      if (dto.delivery) {
        // The workflow starts with the order, and the order keeps its id for the 'delivered' signal.
        const taskId = await this.queue.enqueue('order.fulfil', { orderId: order.id }, { tx, key: `fulfil-${order.id}` });
        return tx.order.update({ where: { id: order.id }, data: { fulfilmentTaskId: taskId } });
      }
      await this.queue.enqueue('order.confirm', { orderId: order.id }, { tx, key: `order-${order.id}` });
      return order;
    });
  }

  /**
   * The courier delivered order `id`: sends 'delivered' to its workflow. The signal is kept until
   * the workflow waits for it, so it may come before the workflow has reserved. 'not-found': no
   * such order; 'no-workflow': not a delivery order; 'finished': its workflow has ended (refunded
   * after its timeout, or delivered already).
   */
  async delivered(id: number, signal: Delivered): Promise<{ signalId: string } | 'not-found' | 'no-workflow' | 'finished'> {
    const order = await this.prisma.order.findUnique({ where: { id }, select: { fulfilmentTaskId: true } });
    if (!order) return 'not-found';
    if (!order.fulfilmentTaskId) return 'no-workflow';
    try {
      return { signalId: await this.queue.signal(order.fulfilmentTaskId, 'delivered', signal) };
    } catch (err) {
      if (err instanceof SignalTargetError) return 'finished';
      throw err;
    }
  }

  /**
   * Edits an order that is not paid yet and asks for (re)confirmation. With onConflict 'rerun', a
   * confirmation that is running right now runs once more afterwards and sees the new revision; a
   * pending one is simply replaced. Returns null when the order cannot be edited any more.
   */
  async edit(id: number, amountCents: number) {
    return this.prisma.$transaction(async (tx) => {
      const { count } = await tx.order.updateMany({
        where: { id, status: { in: ['new', 'confirmed'] }, fulfilmentTaskId: null }, // delivery orders are charged by their workflow
        data: { amountCents, revision: { increment: 1 } },
      });
      if (count === 0) return null;
      await this.queue.enqueue('order.confirm', { orderId: id }, { tx, key: `order-${id}`, onConflict: 'rerun' });
      return tx.order.findUnique({ where: { id } });
    });
  }

  find(id: number) {
    return this.prisma.order.findUnique({ where: { id }, include: { payment: true, emails: true, reservations: true } });
  }
}
