import type { HandlerOptions } from '@app/pg-queue';

/**
 * The queues of dead-instance.spec.ts and its worker process (test/fixtures/liveness-worker.ts),
 * the same on both sides: leases of a minute and handler timeouts longer than any test, so that
 * nothing but the death of their holder can end a claim within a test.
 */
export const LIVENESS_LEASE_MS = 60_000;

export const LIVENESS_QUEUES: Record<string, Partial<HandlerOptions>> = {
  'live.tx': { concurrency: 30, leaseMs: LIVENESS_LEASE_MS, timeoutMs: 300_000 },
  'live.limited': { concurrency: 6, globalConcurrency: 3, leaseMs: LIVENESS_LEASE_MS, timeoutMs: 300_000 },
  'live.lease': { mode: 'lease', concurrency: 10, leaseMs: LIVENESS_LEASE_MS, timeoutMs: 300_000 },
};
