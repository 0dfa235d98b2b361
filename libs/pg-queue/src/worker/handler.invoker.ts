import { TaskTimeoutError } from '../errors';
import { startHandlerSpan } from '../observability/tracing';
import type { HandlerMode } from '../types';
import type { Attempt } from './attempt';

export type InvokeOutcome =
  /** `value`: what the handler returned, when not undefined. */
  | { kind: 'ok'; value?: unknown }
  | { kind: 'error'; error: unknown }
  /**
   * The signal fired (timeout, shutdown, lost lease, cancel) before the handler settled.
   * `settled` resolves once the handler's own promise has, which may be never when it ignores
   * its signal.
   */
  | { kind: 'aborted'; reason: unknown; settled: Promise<void> };

const OK: InvokeOutcome = Object.freeze({ kind: 'ok' });

/**
 * Runs a handler under the attempt's abort and a timeout; the promise never rejects: the outcome
 * says how the handler ended. This runs once per task, so it keeps allocations to a minimum.
 */
export function invokeHandler(attempt: Attempt, timeoutMs: number, run: () => Promise<unknown>): Promise<InvokeOutcome> {
  return new Promise<InvokeOutcome>((resolve) => {
    if (attempt.aborted) {
      resolve({ kind: 'aborted', reason: attempt.abortReason, settled: Promise.resolve() });
      return;
    }
    let handlerPromise: Promise<unknown>;
    try {
      handlerPromise = Promise.resolve(run());
    } catch (error) {
      resolve({ kind: 'error', error });
      return;
    }
    let ended = false;
    const timer = setTimeout(abortOnTimeout, timeoutMs, attempt, timeoutMs);
    const end = (outcome: InvokeOutcome) => {
      if (ended) return;
      ended = true;
      clearTimeout(timer);
      attempt.onAbort = null;
      resolve(outcome);
    };
    attempt.onAbort = (reason) => end({ kind: 'aborted', reason, settled: handlerPromise.then(ignore, ignore) });
    handlerPromise.then(
      (value: unknown) => end(value === undefined ? OK : { kind: 'ok', value }),
      (error: unknown) => end({ kind: 'error', error }),
    );
  });
}

/**
 * {@link invokeHandler} inside the attempt's trace span (see observability/tracing.ts), when tracing
 * is available. Not an async function: per task, its extra promise and awaits would slow a
 * lease-mode drain noticeably.
 */
export function invokeTraced(attempt: Attempt, mode: HandlerMode, timeoutMs: number, run: () => Promise<unknown>): Promise<InvokeOutcome> {
  const span = startHandlerSpan(attempt.task, mode, attempt.traceContext);
  if (!span) return invokeHandler(attempt, timeoutMs, run);
  return invokeHandler(attempt, timeoutMs, () => span.run(run)).then((outcome) => {
    span.end(outcome);
    return outcome;
  });
}

function abortOnTimeout(attempt: Attempt, timeoutMs: number): void {
  attempt.abort(new TaskTimeoutError(attempt.task.id, timeoutMs));
}

function ignore(): void {}
