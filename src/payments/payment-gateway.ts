import { Injectable } from '@nestjs/common';

export class GatewayUnavailableError extends Error {}

/**
 * A stand-in for an external payment provider: network latency, occasional outages, and
 * idempotency keys (a repeated charge with the same key returns the first charge, as real
 * providers do). Failure rate and latency come from the environment so tests can pin them.
 */
@Injectable()
export class PaymentGateway {
  private readonly charges = new Map<string, string>();
  /** Refunds by idempotency key: the charge each refunded. */
  private readonly refunds = new Map<string, string>();
  /** The idempotency key of every charge call, in call order (retries included). */
  readonly chargeKeys: string[] = [];
  failureRate = Number(process.env.GATEWAY_FAILURE_RATE ?? 0.05);
  latencyMs: [number, number] = [Number(process.env.GATEWAY_MIN_MS ?? 2), Number(process.env.GATEWAY_MAX_MS ?? 15)];
  calls = 0;

  async charge(idempotencyKey: string, amountCents: number): Promise<string> {
    this.calls++;
    this.chargeKeys.push(idempotencyKey);
    await this.network();
    let chargeId = this.charges.get(idempotencyKey);
    if (!chargeId) {
      chargeId = `ch_${this.charges.size + 1}_${amountCents}`;
      this.charges.set(idempotencyKey, chargeId);
    }
    return chargeId;
  }

  /** Refunds charge `chargeId`; a repeated refund with the same key is the first one. Returns the refund's id. */
  async refund(chargeId: string, idempotencyKey: string): Promise<string> {
    this.calls++;
    await this.network();
    if (![...this.charges.values()].includes(chargeId)) throw new Error(`no charge ${chargeId}`);
    if (!this.refunds.has(idempotencyKey)) this.refunds.set(idempotencyKey, chargeId);
    return `re_${idempotencyKey}`;
  }

  /** Distinct refunds actually made. */
  get distinctRefunds(): number {
    return this.refunds.size;
  }

  private async network(): Promise<void> {
    const [min, max] = this.latencyMs;
    await new Promise((resolve) => setTimeout(resolve, min + Math.random() * (max - min)));
    if (Math.random() < this.failureRate) throw new GatewayUnavailableError('gateway timeout (simulated)');
  }

  /** Distinct charges actually made (a retried call with the same key is not a new charge). */
  get distinctCharges(): number {
    return this.charges.size;
  }
}
