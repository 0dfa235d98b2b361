import { TaskTimeoutError } from '../errors';
import type { Attempt } from './attempt';

export type InvokeOutcome =
  | { kind: 'ok' }
  | { kind: 'error'; error: unknown }
  /** The signal fired (timeout, shutdown, lost lease) before the handler settled. */
  | { kind: 'aborted'; reason: unknown };

/**
 * Runs a handler under the attempt's AbortSignal and a timeout. It never throws: the outcome says
 * how the handler ended. `settled` resolves once the handler's own promise has settled, which may be
 * after an abort when the handler ignores its signal.
 */
export function invokeHandler(attempt: Attempt, timeoutMs: number, run: () => Promise<void>): { outcome: Promise<InvokeOutcome>; settled: Promise<void> } {
  const { signal } = attempt.controller;
  const handlerPromise = Promise.resolve().then(run);
  const settled = handlerPromise.then(
    () => undefined,
    () => undefined,
  );
  const outcome = new Promise<InvokeOutcome>((resolve) => {
    const timer = setTimeout(() => attempt.controller.abort(new TaskTimeoutError(attempt.task.id, timeoutMs)), timeoutMs);
    const onAbort = () => {
      clearTimeout(timer);
      resolve({ kind: 'aborted', reason: signal.reason });
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    handlerPromise.then(
      () => resolve({ kind: 'ok' }),
      (error: unknown) => resolve({ kind: 'error', error }),
    ).finally(() => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    });
  });
  return { outcome, settled };
}
