import { Injectable } from '@nestjs/common';
import { Workflow, type WorkflowContext } from '@app/pg-queue';
import type { Prisma } from '../generated/prisma/client';
import { PaymentGateway } from '../payments/payment-gateway';
import { PrismaService } from '../prisma/prisma.service';

export interface FulfilOrder {
  orderId: number;
}

/** The payload of the 'delivered' signal (POST /orders/:id/delivered). */
export interface Delivered {
  at: string;
}

/** How long a delivery order waits for its 'delivered' signal before it is refunded. */
export const DELIVERY_TIMEOUT_MS = Number(process.env.DELIVERY_TIMEOUT_MS ?? 3 * 86_400_000);

const GATEWAY_RETRIES = { maxAttempts: 5, backoff: { type: 'exponential', delayMs: 50, maxDelayMs: 1_000 } } as const;

/**
 * Delivery orders (POST /orders with `delivery: true`) run this saga instead of order.confirm →
 * payment.capture: charge, reserve, wait for the courier's 'delivered' signal, and refund if it
 * does not come in time. Each call is journaled: after a crash, a deploy or a wake-up the method
 * runs again from the top and every finished call returns its recorded outcome.
 */
@Injectable()
export class FulfilmentWorkflow {
  constructor(
    private readonly prisma: PrismaService,
    private readonly gateway: PaymentGateway,
  ) {}

  @Workflow('order.fulfil', { concurrency: 4, maxAttempts: 20, backoff: { type: 'exponential', delayMs: 200, maxDelayMs: 10_000, jitter: true } })
  async fulfil(input: FulfilOrder, wf: WorkflowContext<Prisma.TransactionClient>) {
    const { orderId } = input;
    // An outside call, at least once: a crash after the charge and before its record charges
    // again, with the same key, so the gateway returns the first charge. The order's amount is
    // read inside the step too: a read outside a step would run again on every replay.
    const charge = await wf.step('charge', async () => {
      const { amountCents } = await this.prisma.order.findUniqueOrThrow({ where: { id: orderId } });
      return { chargeId: await this.gateway.charge(wf.stepKey('charge'), amountCents), amountCents };
    }, GATEWAY_RETRIES);

    // Business rows, exactly once: they commit with the step's journal row or not at all.
    await wf.transaction('reserve', async (tx) => {
      await tx.payment.create({ data: { orderId, externalRef: charge.chargeId, amountCents: charge.amountCents } });
      await tx.reservation.create({ data: { orderId } });
      await tx.order.update({ where: { id: orderId }, data: { status: 'reserved' } });
    });

    // Parked in the database until the signal comes (no worker, lease or connection held): null on timeout.
    const delivered = await wf.waitForSignal<Delivered>('delivered', { timeoutMs: DELIVERY_TIMEOUT_MS });
    if (!delivered) {
      const refundId = await wf.step('refund', () => this.gateway.refund(charge.chargeId, wf.stepKey('refund')), GATEWAY_RETRIES);
      await wf.transaction('release', async (tx) => {
        await tx.reservation.updateMany({ where: { orderId, releasedAt: null }, data: { releasedAt: new Date() } });
        await tx.order.update({ where: { id: orderId }, data: { status: 'refunded' } });
      });
      return { refunded: true, refundId };
    }

    await wf.transaction('delivered', async (tx) => {
      await tx.order.update({ where: { id: orderId }, data: { status: 'delivered' } });
    });
    // The follow-up, enqueued once: email.send records the e-mail and completes the order.
    await wf.enqueue('email.send', { orderId, kind: 'delivered', chargeId: charge.chargeId });
    return { deliveredAt: delivered.at, chargeId: charge.chargeId };
  }
}
