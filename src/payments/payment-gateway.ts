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
  failureRate = Number(process.env.GATEWAY_FAILURE_RATE ?? 0.05);
  latencyMs: [number, number] = [Number(process.env.GATEWAY_MIN_MS ?? 2), Number(process.env.GATEWAY_MAX_MS ?? 15)];
  calls = 0;

  async charge(idempotencyKey: string, amountCents: number): Promise<string> {
    this.calls++;
    const [min, max] = this.latencyMs;
    await new Promise((resolve) => setTimeout(resolve, min + Math.random() * (max - min)));
    if (Math.random() < this.failureRate) throw new GatewayUnavailableError('gateway timeout (simulated)');
    let chargeId = this.charges.get(idempotencyKey);
    if (!chargeId) {
      chargeId = `ch_${this.charges.size + 1}_${amountCents}`;
      this.charges.set(idempotencyKey, chargeId);
    }
    return chargeId;
  }

  /** Distinct charges actually made (a retried call with the same key is not a new charge). */
  get distinctCharges(): number {
    return this.charges.size;
  }
}
