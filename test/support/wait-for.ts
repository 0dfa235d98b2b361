/**
 * Polls `check` until it returns a truthy value and resolves with it; rejects after `timeoutMs`
 * with `what` and the last value seen. Conditions, not sleeps: the deadline is a generous upper
 * bound that a slow, shared machine still meets, and a fast one never waits for it.
 */
export async function waitFor<T>(what: string, check: () => Promise<T> | T, { timeoutMs = 30_000, everyMs = 100 } = {}): Promise<NonNullable<T>> {
  const until = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      last = await check();
      if (last) return last as NonNullable<T>;
    } catch (err) {
      last = err;
    }
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${describe(last)})`);
    await pause(everyMs);
  }
}

/** A pause for pacing a loop (never as an assertion: use waitFor for conditions). */
export function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function describe(value: unknown): string {
  if (value instanceof Error) return value.message;
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}

/** `promise`'s value, or `onTimeout` if it takes longer than `ms` (the timer is cleared either way). */
export async function within<T, U>(promise: Promise<T>, ms: number, onTimeout: U): Promise<T | U> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([promise, new Promise<U>((resolve) => (timer = setTimeout(() => resolve(onTimeout), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}
