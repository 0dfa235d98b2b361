/**
 * The timers that wake a queue worker when no notification will: the fallback poll (jittered, so
 * instances spread out), the earliest known due time (a retry's backoff, a delayed task) and the
 * retry after a failed claim. All are unref'd: they never keep the process alive.
 */
export class WakeTimers {
  private poll: NodeJS.Timeout | null = null;
  private retry: NodeJS.Timeout | null = null;
  private due: { at: number; timer: NodeJS.Timeout } | null = null;
  private stopped = false;

  constructor(
    private readonly wake: () => void,
    /** Current fallback poll period (longer while LISTEN is healthy). */
    private readonly pollIntervalMs: () => number,
  ) {}

  startPolling(): void {
    const jittered = this.pollIntervalMs() * (0.9 + Math.random() * 0.2);
    this.poll = setTimeout(() => {
      if (this.stopped) return;
      this.wake();
      this.startPolling();
    }, jittered);
    this.poll.unref();
  }

  /** Wakes at `at` (epoch ms, in the future), unless an earlier due wake-up is already set. */
  wakeAt(at: number): void {
    if (this.stopped || (this.due && this.due.at <= at)) return;
    if (this.due) clearTimeout(this.due.timer);
    const timer = setTimeout(() => {
      this.due = null;
      this.wake();
    }, at - Date.now() + 5);
    timer.unref();
    this.due = { at, timer };
  }

  /** Wakes once after `ms`; a retry already set stands. */
  retryAfter(ms: number): void {
    if (this.stopped || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = null;
      this.wake();
    }, ms);
    this.retry.unref();
  }

  stop(): void {
    this.stopped = true;
    if (this.poll) clearTimeout(this.poll);
    if (this.retry) clearTimeout(this.retry);
    if (this.due) clearTimeout(this.due.timer);
  }
}
