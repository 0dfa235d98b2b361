import type { PrismaClient } from '../../src/generated/prisma/client';
import { deferred } from './queue-app';

type TransactionOptions = { maxWait?: number; timeout?: number } | undefined;

/**
 * A PrismaClient whose next interactive transaction can be held at its start and then failed, as
 * when no pool connection frees up in time (Prisma's "Unable to start a transaction in the given
 * time"): deterministic where a real exhausted pool or a stalled network would be a race.
 * Everything else passes through to the real client.
 */
export function withHeldTransactions(real: PrismaClient) {
  let held: { which: (options: TransactionOptions) => boolean; started: () => void; release: Promise<void> } | null = null;
  const client = new Proxy(real, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (prop !== '$transaction') return typeof value === 'function' ? value.bind(target) : value;
      return (fn: unknown, options: TransactionOptions) => {
        const hold = held;
        if (!hold || !hold.which(options)) return value.call(target, fn, options);
        held = null;
        return (async () => {
          hold.started();
          await hold.release;
          throw new Error('Transaction API error: Unable to start a transaction in the given time.');
        })();
      };
    },
  });
  return {
    client,
    /**
     * Holds the next $transaction call that `which` picks (by default one with a maxWait: a
     * transactional worker's batch, not the schedule ticker's pass); `fail()` then rejects it.
     */
    holdNextTransaction(which = (options: TransactionOptions) => options?.maxWait !== undefined) {
      const started = deferred();
      const release = deferred();
      held = { which, started: () => started.resolve(), release: release.promise };
      return { started: started.promise, fail: () => release.resolve() };
    },
  };
}
