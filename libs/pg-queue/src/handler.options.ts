import { CLAIM_MAX } from './core/task-rules';
import { HandlerConfigurationError } from './errors';
import { isOptionsObject, rejectUnknownOptions } from './option-keys';
import type { BackoffOptions, HandlerMode, RateLimit } from './types';

/** Per-handler settings (the module's own are in pg-queue.options.ts); every field has a default (see DEFAULT_HANDLER_OPTIONS). */
export interface HandlerOptions {
  /** 'transactional' (default): exactly-once DB effects. 'lease': external side effects, long work. */
  mode: HandlerMode;
  /** Tasks of this queue running at once in this process (transactional: concurrent transactions). */
  concurrency: number;
  /**
   * The most tasks one claim takes. Below it, claims follow the queue's pace (see ClaimSizer): a
   * fast queue claims large batches, a slow one about what it can start now. Transactional: also
   * the most tasks one transaction runs, each isolated by a savepoint. Lower it for large payloads
   * (a claim holds its payloads in memory).
   */
  batchSize: number;
  maxAttempts: number;
  backoff: BackoffOptions;
  /** A handler running longer fails that attempt with TaskTimeoutError (and is retried). */
  timeoutMs: number;
  /** Lease length; lease-mode workers extend it by heartbeat every leaseMs / 3. */
  leaseMs: number;
  /**
   * Per-group FIFO, one task of a group at a time either way: a task waiting for its retry keeps
   * its place and holds back the later tasks of its group (true, default), or moves behind the
   * tasks waiting in its group when it failed, which run first (false). A dead task always
   * releases its group.
   */
  retryBlocksGroup: boolean;
  /**
   * At most this many tasks of the queue running at once across every instance, in either mode
   * (null: no limit). Enforced in the claim, by Postgres (see limits.sql.ts).
   */
  globalConcurrency: number | null;
  /**
   * At most this many running at once per partition (the enqueue option `partition`; tasks without
   * one form a partition of their own), and claims take the partitions with due work in turn, so a
   * partition with a large backlog does not hold back the others (null: partitions are ignored).
   */
  partitionConcurrency: number | null;
  /**
   * At most `max` tasks of the queue started in any `perMs` window across every instance (null: no
   * limit); with `perPartition: true`, at most `max` per partition (the enqueue option `partition`)
   * instead. Tasks beyond it stay pending, no attempt counted, and start when the window allows.
   */
  rateLimit: RateLimit | null;
  /**
   * Priority aging (null: none): a waiting task's priority is raised one level for every
   * `priorityAgingMs` since it became due, so a steady stream of urgent tasks cannot starve a less
   * urgent one (the aging claim in claim.sql.ts). Claims of the queue then run under its lock, as with the rules
   * above. Not with partitions (partitionConcurrency, rateLimit.perPartition).
   */
  priorityAgingMs: number | null;
  /**
   * A named limiter of the module option `limiters` (null: none): its concurrency and rate budget
   * and its back-offs are shared with every queue that names it, across every instance.
   */
  limiter: string | null;
}

export type { RateLimit };

const RATE_LIMIT_KEYS = Object.keys({ max: true, perMs: true, perPartition: true } satisfies Record<keyof RateLimit, true>);
const BACKOFF_KEYS = Object.keys({ type: true, delayMs: true, maxDelayMs: true, jitter: true } satisfies Record<keyof BackoffOptions, true>);

/** Whether a queue's claims go through the flow-control rules (serialised per queue, see limits.sql.ts). */
export function hasFlowControl(o: HandlerOptions): boolean {
  return o.globalConcurrency !== null || o.partitionConcurrency !== null || o.rateLimit !== null || o.priorityAgingMs !== null || o.limiter !== null;
}

export const DEFAULT_HANDLER_OPTIONS: HandlerOptions = {
  mode: 'transactional',
  concurrency: 10,
  batchSize: 500,
  maxAttempts: 5,
  backoff: { type: 'exponential', delayMs: 1000, maxDelayMs: 3_600_000, jitter: true },
  timeoutMs: 30_000,
  leaseMs: 60_000,
  retryBlocksGroup: true,
  globalConcurrency: null,
  partitionConcurrency: null,
  rateLimit: null,
  priorityAgingMs: null,
  limiter: null,
};

/** The settings a handler may be given (in `handlerDefaults`, `queues[q]`, `@TaskHandler`). */
export const HANDLER_OPTION_KEYS = Object.keys(DEFAULT_HANDLER_OPTIONS);

/** Where a queue's settings live in the module options, as error paths name it: `queues["mail.send"]`. */
export function queueOptionsPath(queue: string): string {
  return `queues[${JSON.stringify(queue)}]`;
}

/**
 * Layers partial options over a base and validates the result. `path` is where `over` was given
 * (`handlerDefaults`, `queues["q"]`, `@TaskHandler("q")`), `where` the handler method if any: both
 * go into the error, so a mistake is found from its message alone.
 */
export function resolveHandlerOptions(path: string, base: HandlerOptions, over?: Partial<HandlerOptions>, where?: string): HandlerOptions {
  if (over !== undefined && !isOptionsObject(over)) throw new HandlerConfigurationError(path, `expected an object of handler settings, got ${JSON.stringify(over)}`, where);
  const fail = (option: string, reason: string): never => {
    throw new HandlerConfigurationError(`${path}.${option}`, reason, where);
  };
  if (over !== undefined) {
    rejectUnknownOptions(over, HANDLER_OPTION_KEYS, fail);
    if (over.backoff !== undefined) {
      if (!isOptionsObject(over.backoff)) fail('backoff', `expected an object, got ${JSON.stringify(over.backoff)}`);
      rejectUnknownOptions(over.backoff, BACKOFF_KEYS, (key, reason) => fail(`backoff.${key}`, reason));
    }
  }
  // An option given as undefined means "not given": it must not wipe out the default (a lost
  // maxDelayMs would let exponential delays overflow Postgres intervals).
  const merged: HandlerOptions = { ...base, ...defined(over), backoff: { ...base.backoff, ...defined(over?.backoff) } };
  const int = (option: keyof HandlerOptions, min: number, max = 1_000_000_000) => {
    const v = merged[option];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
      fail(option, `expected an integer in [${min}, ${max}], got ${JSON.stringify(v)}`);
    }
  };
  if (merged.mode !== 'transactional' && merged.mode !== 'lease') fail('mode', `expected 'transactional' or 'lease', got ${JSON.stringify(merged.mode)}`);
  int('concurrency', 1, 1000);
  int('batchSize', 1, CLAIM_MAX);
  int('maxAttempts', 1, 1_000_000);
  int('timeoutMs', 1);
  int('leaseMs', 100);
  if (typeof merged.retryBlocksGroup !== 'boolean') fail('retryBlocksGroup', 'expected a boolean');
  const limit = (option: 'globalConcurrency' | 'partitionConcurrency') => {
    const v = merged[option];
    if (v !== null && (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > 1_000_000)) {
      fail(option, `expected null or an integer in [1, 1000000], got ${JSON.stringify(v)}`);
    }
  };
  limit('globalConcurrency');
  limit('partitionConcurrency');
  const rate = merged.rateLimit;
  if (rate !== null) {
    if (!isOptionsObject(rate)) fail('rateLimit', `expected null or { max, perMs }, got ${JSON.stringify(rate)}`);
    validateRate(rate, RATE_LIMIT_KEYS, (key, reason) => fail(`rateLimit.${key}`, reason));
    if (rate.perPartition !== undefined && typeof rate.perPartition !== 'boolean') {
      fail('rateLimit.perPartition', `expected a boolean, got ${JSON.stringify(rate.perPartition)}`);
    }
  }
  const aging = merged.priorityAgingMs;
  if (aging !== null) {
    if (typeof aging !== 'number' || !Number.isInteger(aging) || aging < 1 || aging > 31_622_400_000) {
      fail('priorityAgingMs', `expected null or an integer of ms in [1, 31622400000] (366 days), got ${JSON.stringify(aging)}`);
    }
    if (merged.partitionConcurrency !== null || rate?.perPartition === true) {
      fail('priorityAgingMs', 'does not combine with partitions (partitionConcurrency, rateLimit.perPartition): claims there take partitions in turn');
    }
  }
  if (merged.limiter !== null && (typeof merged.limiter !== 'string' || merged.limiter.length === 0)) {
    fail('limiter', `expected null or the name of a limiter in the module option limiters, got ${JSON.stringify(merged.limiter)}`);
  }
  const b = merged.backoff;
  if (!['fixed', 'linear', 'exponential'].includes(b.type)) fail('backoff.type', `expected fixed, linear or exponential, got ${JSON.stringify(b.type)}`);
  if (typeof b.delayMs !== 'number' || !Number.isFinite(b.delayMs) || b.delayMs < 0) fail('backoff.delayMs', 'expected a finite number >= 0');
  if (b.maxDelayMs !== undefined && (typeof b.maxDelayMs !== 'number' || !Number.isFinite(b.maxDelayMs) || b.maxDelayMs < b.delayMs)) {
    fail('backoff.maxDelayMs', 'expected a finite number >= delayMs');
  }
  return merged;
}

/** A rate limit's keys, `max` and `perMs` (a handler's rateLimit, a named limiter's); `fail` gets the key at fault. */
export function validateRate(rate: object, keys: readonly string[], fail: (key: string, reason: string) => never): void {
  rejectUnknownOptions(rate, keys, fail);
  const { max, perMs } = rate as { max?: unknown; perMs?: unknown };
  if (!Number.isInteger(max) || (max as number) < 1 || (max as number) > 100_000) fail('max', `expected an integer in [1, 100000], got ${JSON.stringify(max)}`);
  if (!Number.isInteger(perMs) || (perMs as number) < 1 || (perMs as number) > 31_622_400_000) {
    fail('perMs', `expected an integer of ms in [1, 31622400000] (366 days), got ${JSON.stringify(perMs)}`);
  }
}

function defined<T extends object>(value: T | undefined): Partial<T> {
  if (!value || typeof value !== 'object') return {};
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
