import type { Logger } from '@nestjs/common';
import type { PauseRepository } from '../sql/pause.repository';
import type { PrismaClientLike } from '../types';
import { PeriodicPass } from './periodic.pass';
import type { QueueWorker } from './queue.worker';

/**
 * Keeps this process's workers told which of their queues are paused as a whole (see
 * pause.sql.ts), so that a paused queue's worker sends no claims: read at start (before any
 * worker claims), set by the `!pause`/`!resume` notifications, and read again every poll period
 * (`intervalMs`: the workers' fallback poll, longer while LISTEN is healthy) and after the LISTEN
 * connection came back. A claim of a paused queue takes nothing whatever this says; what it
 * guards against is only wasted claims, and a missed resume costing more than one period.
 * A read that was under way when a notification came is not applied (it may predate it).
 */
export class PauseWatcher {
  /** Reads every period, not jittered: the period is the workers' poll, which is. */
  private readonly loop: PeriodicPass;
  private stopped = false;
  private reading: Promise<void> | null = null;
  /** Notifications applied so far: a read applies only if none came while it ran. */
  private notices = 0;

  constructor(
    private readonly db: PrismaClientLike,
    private readonly repo: PauseRepository,
    private readonly workers: () => Iterable<QueueWorker>,
    intervalMs: () => number,
    private readonly logger: Logger,
  ) {
    this.loop = new PeriodicPass(() => this.readOrWarn(), intervalMs, 0, (err) => this.logger.warn(`could not read paused queues: ${(err as Error).message}`));
  }

  /** Reads the pauses now (a failure fails the start: claims would fail too), then every period. */
  async start(): Promise<void> {
    await this.read();
    this.loop.schedule();
  }

  /** `!pause <queue>` / `!resume <queue>`: applied at once (notifications arrive in commit order). */
  notice(queue: string, paused: boolean): void {
    this.notices++;
    for (const w of this.workers()) if (w.queue === queue) w.setPaused(paused);
  }

  /** Reads again now (the LISTEN connection came back: notifications may have been missed). */
  refresh(): void {
    if (this.stopped) return;
    void this.readOrWarn();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop.stop();
    await this.reading;
  }

  private read(): Promise<void> {
    const seen = this.notices;
    const reading = this.repo.list(this.db).then((pauses) => {
      if (this.stopped || seen !== this.notices) return;
      const paused = new Set(pauses.filter((p) => p.partition === null).map((p) => p.queue));
      for (const w of this.workers()) w.setPaused(paused.has(w.queue));
    });
    // What stop() waits for: it settles either way, so a failed read rejects only where it is caught.
    this.reading = reading.catch(() => undefined);
    return reading;
  }

  /** A read after the start: a failure is logged, and the next period reads again. */
  private readOrWarn(): Promise<void> {
    return this.read().catch((err: unknown) => this.logger.warn(`could not read paused queues: ${(err as Error).message}`));
  }
}
