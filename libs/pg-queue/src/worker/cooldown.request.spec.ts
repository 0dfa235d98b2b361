import { RateLimitedError } from '../errors';
import type { RegisteredHandler } from '../discovery/task-handler.registry';
import type { Attempt } from './attempt';
import { backOffOf, type BackOffDeps } from './cooldown.request';

describe('backOffOf', () => {
  const attempt = { lease: { id: '7', token: '00000000-0000-4000-8000-000000000000' }, ranUntil: 0 } as unknown as Attempt;
  const handler = { options: { limiter: null } } as unknown as RegisteredHandler;
  const deps = { limiters: new Map(), maxErrorBytes: 1000, clock: { now: () => 1_000_000 } } as unknown as BackOffDeps;

  // Back-offs of a burst travel in one JSON parameter: a reason jsonb rejects (U+0000, a lone
  // surrogate's escape) would fail the whole burst, not its own attempt.
  it('keeps a reason that text and jsonb both store', () => {
    const b = backOffOf(new RateLimitedError({ retryAfterMs: 500, scope: 'queue', reason: 'upstream \u0000 said \ud800 no' }), attempt, handler, deps);
    expect(b).toEqual(expect.objectContaining({ scope: 'queue', untilMs: 1_000_500 }));
    const reason = (b as { reason: string }).reason;
    expect({ nul: reason.includes('\u0000'), loneSurrogate: /[\ud800-\udbff](?![\udc00-\udfff])/.test(reason), replaced: reason.includes('\ufffd') }).toEqual({ nul: false, loneSurrogate: false, replaced: true });
  });
});
