import type { BackoffOptions } from '../types';

/**
 * Delay before the retry that follows failed attempt number `attempt` (1-based).
 * fixed: d; linear: d * attempt; exponential: d * 2^(attempt-1); all capped by maxDelayMs.
 * With jitter the delay is drawn from [delay/2, delay] so a burst of failures spreads out.
 */
export function backoffDelayMs(backoff: BackoffOptions, attempt: number, random: () => number = Math.random): number {
  const n = Math.max(1, attempt);
  let delay: number;
  switch (backoff.type) {
    case 'fixed':
      delay = backoff.delayMs;
      break;
    case 'linear':
      delay = backoff.delayMs * n;
      break;
    case 'exponential':
      delay = backoff.delayMs * 2 ** Math.min(n - 1, 52);
      break;
  }
  if (backoff.maxDelayMs !== undefined) delay = Math.min(delay, backoff.maxDelayMs);
  if (backoff.jitter) delay = delay / 2 + (delay / 2) * random();
  return Math.round(delay);
}
