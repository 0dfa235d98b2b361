import { Injectable } from '@nestjs/common';
import { TaskHandler, type Task, type LeaseTaskContext } from '@app/pg-queue';
import { PrismaService } from '../prisma/prisma.service';
import { PaymentGateway } from './payment-gateway';

export interface CapturePayment {
  orderId: number;
}

@Injectable()
export class PaymentHandlers {
  constructor(
    private readonly prisma: PrismaService,
    private readonly gateway: PaymentGateway,
  ) {}

  /**
   * Lease mode: the gateway call is an external side effect and must not sit inside a database
   * transaction. At-least-once, so the charge carries an idempotency key derived from the order and
   * the payment row is an upsert on it: a repeated attempt neither charges twice nor inserts twice.
   */
  @TaskHandler('payment.capture', {
    mode: 'lease',
    concurrency: 20,
    maxAttempts: 8,
    leaseMs: 30_000,
    timeoutMs: 10_000,
    backoff: { type: 'exponential', delayMs: 50, maxDelayMs: 2_000, jitter: true },
    limiter: 'gateway',
  })
  async capture(task: Task<CapturePayment>, ctx: LeaseTaskContext): Promise<void> {
    const { orderId } = task.payload;
    const { amountCents } = await this.prisma.order.findUniqueOrThrow({ where: { id: orderId } });
    const externalRef = `order-${orderId}`;
    const chargeId = await this.gateway.charge(externalRef, amountCents);
    await this.prisma.$transaction([
      this.prisma.payment.upsert({
        where: { externalRef },
        create: { orderId, externalRef, amountCents },
        update: {},
      }),
      this.prisma.order.update({ where: { id: orderId }, data: { status: 'paid' } }),
    ]);
    await ctx.enqueue('email.send', { orderId, kind: 'receipt', chargeId });
  }
}
