import type { RegisteredHandler } from '../discovery/task-handler.registry';
import { PgQueueError, RateLimitedError } from '../errors';
import type { ResolvedLimiters } from '../limiter.options';
import type { BackOff } from '../sql/statement-values';
import type { Attempt } from './attempt';
import type { DatabaseClock } from './database.clock';
import { storableText, truncateUtf8 } from './error-text';

/** What resolving a back-off needs of the worker (see WorkerDeps). */
export interface BackOffDeps {
  limiters: ResolvedLimiters;
  maxErrorBytes: number;
  clock: DatabaseClock;
}

/**
 * What a handler's RateLimitedError asks for, its scope resolved against the handler's settings:
 * no scope means the handler's limiter when it has one, else its queue; any other name must be a
 * configured limiter. Returns null for any other outcome, and an error (recorded as the attempt's
 * failure) for a scope that names no limiter: a mistake in the handler, not a back-off.
 */
export function backOffOf(error: unknown, a: Attempt, handler: RegisteredHandler, deps: BackOffDeps): BackOff | PgQueueError | null {
  if (!(error instanceof RateLimitedError)) return null;
  const asked = error.scope ?? handler.options.limiter ?? 'queue';
  const { limiters, maxErrorBytes, clock } = deps;
  // Dated from the handler's end on the database's clock: the statement that records it may wait for a connection.
  const sinceEndMs = a.ranUntil > 0 ? performance.now() - a.ranUntil : 0;
  // The reason as the operator reads it (no stack: nothing failed), storable in jsonb: a burst's
  // back-offs go in one JSON parameter, which one unstorable reason would fail for all of them.
  const reason = truncateUtf8(storableText(error.message), maxErrorBytes);
  const base = { ...a.lease, untilMs: clock.now() - sinceEndMs + error.retryAfterMs, reason };
  if (asked === 'task' || asked === 'queue' || asked === 'partition') return { ...base, scope: asked, limiter: null };
  if (!limiters.has(asked)) {
    return new PgQueueError(`pg-queue: RateLimitedError names scope ${JSON.stringify(asked)}, which is neither 'task', 'partition', 'queue' nor a limiter of the module option limiters`);
  }
  return { ...base, scope: 'limiter', limiter: asked };
}

/**
 * The back-off stops every claim of the handler's queue: its scope is the queue, or the queue's
 * own limiter (a limiter of other queues only stops theirs).
 */
export function holdsWholeQueue(b: BackOff, handler: RegisteredHandler): boolean {
  return b.scope === 'queue' || (b.scope === 'limiter' && b.limiter === handler.options.limiter);
}
