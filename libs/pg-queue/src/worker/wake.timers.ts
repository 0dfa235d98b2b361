/**
 * The timers that wake a queue worker when no notification will: the fallback poll (jittered, so
 * instances spread out), the earliest known due time (a retry's backoff, a delayed task) and the
 * retry after a failed claim. All are unref'd: they never keep the process alive.
 *
 * One due timer is enough: every claim that comes back short reports the queue's next due time,
 * so after each wake-up the timer is set again for whatever is due next. Due times are relative
 * delays measured on the monotonic clock, never compared with Date.now(). A delay longer than
 * setTimeout allows (about 24.8 days) is waited for in steps.
 */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** Wake this much after a due time, so the claim finds the task due by the database's clock too. */
const DUE_SLACK_MS = 2;

export class WakeTimers {
  private poll: NodeJS.Timeout | null = null;
  private retry: NodeJS.Timeout | null = null;
  /** The pending due wake-up, with its time on the monotonic clock (performance.now()). */
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

  /** Wakes in `ms`, unless an earlier due wake-up is already set. */
  dueIn(ms: number): void {
    const at = performance.now() + Math.max(0, ms) + DUE_SLACK_MS;
    if (this.stopped || (this.due && this.due.at <= at)) return;
    if (this.due) clearTimeout(this.due.timer);
    this.armDue(at);
  }

  private armDue(at: number): void {
    const timer = setTimeout(() => {
      if (performance.now() < at) return this.armDue(at); // a step of a long wait
      this.due = null;
      this.wake();
    }, Math.min(MAX_TIMER_MS, Math.max(0, at - performance.now())));
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
