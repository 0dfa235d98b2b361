import { TaskTimeoutError } from '../errors';
import type { Attempt } from './attempt';

export type InvokeOutcome =
  | { kind: 'ok' }
  | { kind: 'error'; error: unknown }
  /** The signal fired (timeout, shutdown, lost lease) before the handler settled. */
  | { kind: 'aborted'; reason: unknown };

/**
 * Runs a handler under the attempt's abort and a timeout. It never throws: the outcome says how the
 * handler ended. `settled` resolves once the handler's own promise has settled, which may be after
 * an abort when the handler ignores its signal.
 */
export function invokeHandler(attempt: Attempt, timeoutMs: number, run: () => Promise<void>): { outcome: Promise<InvokeOutcome>; settled: Promise<void> } {
  const handlerPromise = Promise.resolve().then(run);
  const settled = handlerPromise.then(ignore, ignore);
  const outcome = new Promise<InvokeOutcome>((resolve) => {
    if (attempt.aborted) {
      resolve({ kind: 'aborted', reason: attempt.abortReason });
      return;
    }
    const timer = setTimeout(() => attempt.abort(new TaskTimeoutError(attempt.task.id, timeoutMs)), timeoutMs);
    const done = (result: InvokeOutcome) => {
      clearTimeout(timer);
      attempt.onAbort = null;
      resolve(result);
    };
    attempt.onAbort = (reason) => done({ kind: 'aborted', reason });
    handlerPromise.then(
      () => done({ kind: 'ok' }),
      (error: unknown) => done({ kind: 'error', error }),
    );
  });
  return { outcome, settled };
}

function ignore(): void {}
