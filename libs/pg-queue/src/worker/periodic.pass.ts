/**
 * A pass that runs again and again, for the maintenance loops (rescuer, pruner, handler presence,
 * pause watcher): one pass at a time, the next about `intervalMs()` after the last ended (±`jitter`
 * of it, so that instances started together do not run theirs in step), or sooner when a pass
 * asks. `stop()` starts no pass after it and resolves once the pass under way has ended. The timer
 * does not keep the process alive.
 */
export class PeriodicPass {
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  private running: Promise<void> | null = null;

  constructor(
    /** One pass; what it resolves with, when a number, is how soon (ms) the next should come at the latest. */
    private readonly pass: () => Promise<number | null | void>,
    private readonly intervalMs: () => number,
    private readonly jitter = 0.2,
    /** Told of a pass that threw when a timer started it (a pass reports its own failures first). */
    private readonly onError: (err: unknown) => void = () => undefined,
  ) {}

  get isStopped(): boolean {
    return this.stopped;
  }

  /** The next pass in about the interval, or in `soonerMs` if that is sooner. */
  schedule(soonerMs: number | null = null): void {
    if (this.stopped || this.timer !== null) return;
    const interval = this.intervalMs() * (1 - this.jitter + Math.random() * 2 * this.jitter);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.now().catch(this.onError);
    }, soonerMs === null ? interval : Math.min(interval, Math.max(0, soonerMs)));
    this.timer.unref();
  }

  /**
   * Runs a pass now (joins the one under way, if any), then schedules the next. A pass reports its
   * own failures; one that throws anyway rejects this call (a timer's call tells onError), and the
   * schedule goes on. After stop(), nothing.
   */
  now(): Promise<void> {
    if (this.stopped) return Promise.resolve();
    if (this.running) return this.running;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const running = Promise.resolve()
      .then(() => this.pass())
      .then(
        (asked) => {
          this.running = null;
          this.schedule(typeof asked === 'number' ? asked : null);
        },
        (err: unknown) => {
          this.running = null;
          this.schedule();
          throw err;
        },
      );
    this.running = running;
    return running;
  }

  /** Starts no pass after this; resolves once the pass under way (if any) ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running?.catch(() => undefined);
  }
}
