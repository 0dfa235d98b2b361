import type { Logger } from '@nestjs/common';
import type { WorkflowRepository } from '../sql/workflow.repository';
import type { SqlExecutor } from '../types';
import type { DatabaseClock } from '../worker/database.clock';

/** Parked workflows woken per statement. */
const WAKE_BATCH = 500;

/**
 * Wakes every due parked workflow of `queues`, WAKE_BATCH per statement, until none is left or
 * `stop()`; `woken` after each statement that woke some (workers can claim them while the next
 * batch wakes). Returns how many, and the next wake time among those left (epoch ms, or null).
 */
export async function wakeDue(
  db: SqlExecutor,
  repo: WorkflowRepository,
  queues: string[],
  woken: () => void = () => undefined,
  stop: () => boolean = () => false,
): Promise<{ woke: number; nextMs: number | null }> {
  let woke = 0;
  for (;;) {
    const r = await repo.wakeDue(db, queues, WAKE_BATCH);
    woke += r.woke;
    if (r.woke > 0) woken();
    if (r.woke < WAKE_BATCH || stop()) return { woke, nextMs: r.nextMs };
  }
}

/**
 * Wakes this process's parked workflows whose time has come (sleeps, signal waits that time out):
 * at start, at the earliest wake time it knows (from its own parks, `!wake@` notifications of other
 * instances' parks, and each round's look at the next one), and at least every `pollMs`. Several
 * instances may wake the same queue: the statement skips rows another holds.
 */
export class WorkflowWaker {
  private timer: NodeJS.Timeout | null = null;
  private timerAt = Number.POSITIVE_INFINITY;
  private running: Promise<void> | null = null;
  private again = false;
  private closed = false;

  constructor(
    private readonly db: SqlExecutor,
    private readonly repo: WorkflowRepository,
    private readonly queues: string[],
    private readonly clock: DatabaseClock,
    private readonly pollMs: number,
    private readonly logger: Logger,
    /** Workflows were woken: this process's workers look at once (the NOTIFY would cost a round trip more). */
    private readonly onWoke: () => void = () => undefined,
  ) {}

  start(): void {
    void this.request();
  }

  /** A workflow parked until `epochMs` (database clock): wake then, unless a wake is set earlier. */
  wakeAt(epochMs: number): void {
    if (this.closed) return;
    this.schedule(Math.max(0, this.clock.msUntil(epochMs)));
  }

  /** Wakes due workflows now (or once more after the round under way). */
  request(): Promise<void> {
    if (this.closed) return Promise.resolve();
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = this.loop().finally(() => (this.running = null));
    return this.running;
  }

  async stop(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    while (this.running) await this.running;
  }

  private async loop(): Promise<void> {
    let next: number | null = null;
    do {
      this.again = false;
      try {
        next = (await wakeDue(this.db, this.repo, this.queues, this.onWoke, () => this.closed)).nextMs;
      } catch (err) {
        this.logger.error(`waking parked workflows failed: ${(err as Error).message}`);
        next = null;
      }
    } while (this.again && !this.closed);
    this.schedule(next === null ? this.pollMs : Math.min(this.pollMs, Math.max(0, this.clock.msUntil(next))));
  }

  private schedule(ms: number): void {
    if (this.closed) return;
    const at = Date.now() + ms;
    if (this.timer && this.timerAt <= at) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.timerAt = Number.POSITIVE_INFINITY;
      void this.request();
    }, ms);
    this.timer.unref();
  }
}
