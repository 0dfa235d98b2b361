import type { BackoffOptions } from '../types';
import { backoffDelayMs } from '../worker/backoff';
import type { StepOptions } from './workflow.api';
import { StepTimeoutError } from './workflow.errors';

const DEFAULT_STEP_BACKOFF: BackoffOptions = { type: 'exponential', delayMs: 500, maxDelayMs: 30_000 };

/**
 * Runs a step's function up to `o.maxAttempts` times within the attempt (`o.backoff` between runs,
 * `o.timeoutMs` per run), until `signal` fires: the step's own retries, before its error reaches
 * the workflow.
 */
export async function runStep<T>(fn: () => T | Promise<T>, o: StepOptions, signal: AbortSignal): Promise<T> {
  const max = Math.max(1, o.maxAttempts ?? 1);
  for (let run = 1; ; run++) {
    if (signal.aborted) throw signal.reason;
    try {
      return await withTimeout(fn, o.timeoutMs);
    } catch (err) {
      if (run >= max || signal.aborted) throw err;
      await delay(backoffDelayMs(o.backoff ?? DEFAULT_STEP_BACKOFF, run), signal);
    }
  }
}

async function withTimeout<T>(fn: () => T | Promise<T>, timeoutMs: number | undefined): Promise<T> {
  if (timeoutMs === undefined) return fn();
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      Promise.resolve().then(fn),
      new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new StepTimeoutError(timeoutMs)), timeoutMs))),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

function delay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
