import { InvalidArgumentError, InvalidOptionsError, MIN_BACK_OFF_MS, RateLimitedError } from './errors';
import { resolveModuleOptions } from './pg-queue.options';

const prisma = { $queryRawUnsafe: () => undefined, $transaction: () => undefined } as never;
const resolve = (extra: object) => resolveModuleOptions({ prisma, ...extra });

describe('limiters (module option) and RateLimitedError', () => {
  it('resolves limiters, absent rules as null', () => {
    const { limiters } = resolve({ limiters: { stripe: { concurrency: 20, rateLimit: { max: 100, perMs: 1000 } }, mail: { concurrency: 3 } } });
    expect([...limiters.values()]).toEqual([
      { name: 'stripe', concurrency: 20, rateLimit: { max: 100, perMs: 1000 } },
      { name: 'mail', concurrency: 3, rateLimit: null },
    ]);
  });

  it.each([
    [{ limiters: { queue: {} } }, 'limiters["queue"]', 'a back-off scope'],
    [{ limiters: { '': {} } }, 'limiters[""]', '1 to 200 characters'],
    [{ limiters: { a: { concurrency: 0 } } }, 'limiters["a"].concurrency', 'integer in [1, 1000000]'],
    [{ limiters: { a: { rateLimit: { max: 1, perMs: 1000, perPartition: true } } } }, 'limiters["a"].rateLimit.perPartition', 'unknown option'],
    [{ limiters: { a: { rate: 1 } } }, 'limiters["a"].rate', 'rateLimit'],
    [{ limiters: [] }, 'limiters', 'object of limiters'],
    [{ queues: { 'a.q': { limiter: 'nope' } } }, 'queues["a.q"].limiter', 'none is configured'],
    [{ limiters: { a: {} }, handlerDefaults: { limiter: 'b' } }, 'handlerDefaults.limiter', 'known: a'],
    [{ queues: { 'a.q': { limiter: 3 } } }, 'queues["a.q"].limiter', 'expected null or the name of a limiter'],
  ])('rejects %j at %s', (options, path, reason) => {
    expect(() => resolve(options)).toThrow(InvalidOptionsError);
    expect(() => resolve(options)).toThrow(`invalid option ${path}`);
    expect(() => resolve(options)).toThrow(reason);
  });

  it('RateLimitedError checks its delay and scope, and reads Retry-After (seconds or an HTTP date)', () => {
    expect(new RateLimitedError({ retryAfterMs: 1500.4, scope: 'stripe' })).toMatchObject({ retryAfterMs: 1500, scope: 'stripe', name: 'RateLimitedError' });
    // A shorter back-off (Retry-After: 0) lasts the floor: no uncounted claim loop.
    expect(new RateLimitedError({ retryAfterMs: 0 })).toMatchObject({ retryAfterMs: MIN_BACK_OFF_MS, message: `pg-queue: rate limited, back off ${MIN_BACK_OFF_MS} ms` });
    expect(() => new RateLimitedError({ retryAfterMs: -1 })).toThrow(InvalidArgumentError);
    expect(() => new RateLimitedError({ retryAfterMs: Number.NaN })).toThrow(/retryAfterMs/);
    expect(() => new RateLimitedError({ retryAfterMs: 1, scope: '' })).toThrow(/scope/);
    expect(RateLimitedError.retryAfterMs('120')).toBe(120_000);
    expect(RateLimitedError.retryAfterMs('0.5')).toBe(500);
    const now = Date.parse('2026-11-26T00:00:00Z');
    expect(RateLimitedError.retryAfterMs('Thu, 26 Nov 2026 00:00:30 GMT', now)).toBe(30_000);
    expect(RateLimitedError.retryAfterMs('Wed, 25 Nov 2026 23:00:00 GMT', now)).toBe(0);
    expect(RateLimitedError.retryAfterMs(null)).toBeNull();
    expect(RateLimitedError.retryAfterMs('soon')).toBeNull();
  });
});
