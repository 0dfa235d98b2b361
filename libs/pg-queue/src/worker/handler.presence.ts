import type { Logger } from '@nestjs/common';
import { METRICS_COUNT_CAP } from '../sql/inspect.sql';
import type { HandlerRepository, UnhandledQueue } from '../sql/handlers.repository';
import type { PrismaClientLike } from '../types';
import { PeriodicPass } from './periodic.pass';

/** How often a queue that stays unhandled is named again in the logs, by each instance. */
const WARN_REPEAT_MS = 5 * 60_000;

/**
 * Records in queue_handler which queues this instance handles, and warns about queues with due
 * tasks that no running instance handles (a typo in a @TaskHandler queue name, or no worker
 * deployed: their tasks would otherwise stay pending with no sign anywhere). One statement at start
 * and on a pass every `intervalMs` (rescueIntervalMs), jittered like the lease rescuer's. Its rows
 * expire three passes (plus 10 s of slack for a busy event loop) after the last: an instance that
 * died stops counting as a handler then; one that shuts down marks them expired at once. A queue
 * is reported once it has been unhandled for two passes, so a handler restarting is not.
 */
export class HandlerPresence {
  private readonly loop: PeriodicPass;
  /** Queues reported, and when: named again every WARN_REPEAT_MS while still unhandled. */
  private readonly warned = new Map<string, number>();

  constructor(
    private readonly db: PrismaClientLike,
    private readonly repo: HandlerRepository,
    private readonly instance: string,
    /** The queues this instance has handlers for (none: it only reports). */
    private readonly queues: readonly string[],
    private readonly intervalMs: number,
    private readonly logger: Logger,
  ) {
    this.loop = new PeriodicPass(() => this.runOnce(), () => intervalMs, 0.2, (err) => this.logger.error(`handler presence pass failed: ${(err as Error).message}`));
  }

  /**
   * The first pass now (this instance's rows written, unhandled queues reported), then one every
   * intervalMs. Does not wait for it: a database slow to answer does not hold up startup.
   */
  start(): void {
    this.loop.now().catch((err: unknown) => this.logger.error(`handler presence: ${(err as Error).message}`));
  }

  /** Starts no pass after this, waits for the one under way, and marks this instance's rows expired. */
  async stop(): Promise<void> {
    await this.loop.stop();
    try {
      await this.repo.retire(this.db, this.instance);
    } catch (err) {
      this.logger.warn(`could not mark this instance's queues as no longer handled (they count as handled until their rows expire): ${(err as Error).message}`);
    }
  }

  private async runOnce(): Promise<void> {
    let unhandled: UnhandledQueue[];
    try {
      unhandled = await this.repo.pass(this.db, {
        instance: this.instance,
        queues: this.queues,
        ttlMs: 3 * this.intervalMs + 10_000,
        graceMs: 2 * this.intervalMs,
        countCap: METRICS_COUNT_CAP,
      });
    } catch (err) {
      this.logger.error(`recording the queues this instance handles failed: ${(err as Error).message}`);
      return;
    }
    const now = Date.now();
    const named = new Set(unhandled.map((u) => u.queue));
    for (const queue of this.warned.keys()) if (!named.has(queue)) this.warned.delete(queue);
    for (const u of unhandled) {
      const last = this.warned.get(u.queue);
      if (last !== undefined && now - last < WARN_REPEAT_MS) continue;
      this.warned.set(u.queue, now);
      const due = u.due >= METRICS_COUNT_CAP ? `${METRICS_COUNT_CAP}+ due tasks` : `${u.due} due task${u.due === 1 ? '' : 's'}`;
      this.logger.warn(
        `queue "${u.queue}" has ${due} and no running instance handles it (for ${Math.round(u.unhandledMs / 1000)} s) — a typo in a @TaskHandler queue name, or no worker deployed?`,
      );
    }
  }
}
