/** `promise`'s value, or `onTimeout` once `ms` have passed first (the timer is cleared either way; the promise runs on). */
export async function within<T, U>(promise: Promise<T>, ms: number, onTimeout: U): Promise<T | U> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([promise, new Promise<U>((resolve) => (timer = setTimeout(resolve, Math.max(0, ms), onTimeout)))]);
  } finally {
    clearTimeout(timer);
  }
}
