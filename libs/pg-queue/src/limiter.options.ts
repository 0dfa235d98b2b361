import { InvalidOptionsError } from './errors';
import { validateRate, type HandlerOptions } from './handler.options';
import { isOptionsObject, rejectUnknownOptions } from './option-keys';

/** A named limiter (module option `limiters`): a budget several queues share. */
export interface LimiterOptions {
  /** At most this many tasks of all the limiter's queues running at once, across every instance. */
  concurrency?: number;
  /** At most `max` tasks of all the limiter's queues started in any `perMs` window. */
  rateLimit?: { max: number; perMs: number };
}

/** A validated limiter: absent rules are null. */
export interface ResolvedLimiter {
  name: string;
  concurrency: number | null;
  rateLimit: { max: number; perMs: number } | null;
}

export type ResolvedLimiters = ReadonlyMap<string, ResolvedLimiter>;

/** Back-off scopes that are not limiter names (see RateLimitedError). */
export const RESERVED_SCOPES = ['task', 'partition', 'queue'] as const;

const LIMITER_KEYS = Object.keys({ concurrency: true, rateLimit: true } satisfies Record<keyof LimiterOptions, true>);
const RATE_KEYS = ['max', 'perMs'];

/** Validates the module option `limiters` (clear errors at module start). */
export function resolveLimiters(given: unknown): ResolvedLimiters {
  const limiters = new Map<string, ResolvedLimiter>();
  if (given === undefined) return limiters;
  if (!isOptionsObject(given)) throw new InvalidOptionsError('limiters', 'expected an object of limiters by name');
  for (const [name, l] of Object.entries(given)) {
    const path = `limiters[${JSON.stringify(name)}]`;
    const fail = (option: string, reason: string): never => {
      throw new InvalidOptionsError(option ? `${path}.${option}` : path, reason);
    };
    if (name.length === 0 || name.length > 200) fail('', 'a limiter name is 1 to 200 characters');
    if ((RESERVED_SCOPES as readonly string[]).includes(name)) fail('', `"${name}" is a back-off scope, not a limiter name`);
    if (!isOptionsObject(l)) fail('', `expected { concurrency, rateLimit }, got ${JSON.stringify(l)}`);
    rejectUnknownOptions(l, LIMITER_KEYS, fail);
    const { concurrency, rateLimit } = l as LimiterOptions;
    if (concurrency !== undefined && (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 1_000_000)) {
      fail('concurrency', `expected an integer in [1, 1000000], got ${JSON.stringify(concurrency)}`);
    }
    if (rateLimit !== undefined) {
      if (!isOptionsObject(rateLimit)) fail('rateLimit', `expected { max, perMs }, got ${JSON.stringify(rateLimit)}`);
      validateRate(rateLimit, RATE_KEYS, (key, reason) => fail(`rateLimit.${key}`, reason));
    }
    limiters.set(name, { name, concurrency: concurrency ?? null, rateLimit: rateLimit ? { max: rateLimit.max, perMs: rateLimit.perMs } : null });
  }
  return limiters;
}

/** A handler's `limiter` names one of the module's limiters. */
export function assertLimiterKnown(path: string, options: HandlerOptions, limiters: ResolvedLimiters, where?: string): void {
  if (options.limiter === null || limiters.has(options.limiter)) return;
  const known = [...limiters.keys()];
  throw new InvalidOptionsError(`${path}.limiter`, `no limiter named ${JSON.stringify(options.limiter)} in the module option limiters (${known.length > 0 ? `known: ${known.join(', ')}` : 'none is configured'})`, where);
}
