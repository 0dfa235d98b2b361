import { PgQueueError } from '../errors';
import type { DrainLeft, DrainRepository } from '../sql/drain.repository';
import type { SqlExecutor } from '../types';
import type { DependencySettler } from './dependency.settler';
import type { QueueWorker } from './queue.worker';

/** Options of `drainQueue` (testing/index.ts) that reach the drain. */
export interface DrainOptions {
  /** Drain this queue only (default: every queue the app handles). */
  queue?: string;
  /** Make pending tasks of the drained queues that are due later (delays, retries' backoff) due now, each round. */
  runDelayed?: boolean;
  /** The longest the drain may take before it throws DrainTimeoutError (default 30 000 ms). */
  timeoutMs?: number;
}

/** What a drain did and could not do. */
export interface DrainReport {
  /** Attempts that ended in this app's workers of the drained queues while it ran (ones started before it included). */
  ran: number;
  /**
   * Queues no handler of this app handles that have due tasks (any pending task, with
   * runDelayed), and how many: only when no queue was named, else empty.
   */
  undrained: { queue: string; pending: number }[];
}

export const DEFAULT_DRAIN_TIMEOUT_MS = 30_000;

/**
 * `drainQueue` (from `@pg-queue/nestjs/testing`) passed its `timeoutMs` before the queues were
 * quiet: a handler of the app that does not return, dependencies that are not settled, or tasks
 * that keep coming (a task that re-enqueues itself, with `runDelayed`). `left` says, per drained
 * queue with anything left, what was there when it gave up (`running`: under a live lease, in
 * this process or another).
 */
export class DrainTimeoutError extends PgQueueError {
  constructor(
    readonly timeoutMs: number,
    readonly left: readonly DrainLeft[],
  ) {
    const parts = left.map((l) => {
      const what = [
        l.running && `${l.running} running`,
        l.due && `${l.due} due`,
        l.waiting && `${l.waiting} waiting for dependencies`,
        l.parked && `${l.parked} parked workflows (wakeWorkflows ends their sleeps)`,
        l.unsettled && `${l.unsettled} dependency settlements pending`,
        l.expired && `${l.expired} running with an expired lease (rescueExpiredLeases returns them)`,
      ].filter(Boolean);
      return `${l.queue}: ${what.join(', ')}`;
    });
    super(`pg-queue: drainQueue: still not quiet after ${timeoutMs} ms: ${parts.join('; ') || 'nothing left by now'}`);
  }
}

/** The longest pause between two looks at dependency settlements that another process holds. */
const MAX_PAUSE_MS = 200;

/**
 * The test helper's drain: rounds over the drained queues until they are quiet.
 *
 * A round settles dependency debts (parents that ended, here or anywhere), then runs every due task
 * of each queue inline (QueueWorker.drain, which also waits for the attempts this app's own worker
 * loop holds, claimed before the drain or during it). It then counts the attempts that ended in
 * those workers during the round, however they were claimed: any means follow-ups or dependants
 * may have landed in a queue the round had passed (or, with runDelayed, a retry was scheduled), so
 * another round runs; so does a worker that holds something again. A round in which nothing ended
 * and no worker holds anything asks the database whether a dependant of the queues still has debts
 * to settle (another process's settler holds them): then it looks again after a pause (growing to
 * MAX_PAUSE_MS), else the queues are quiet.
 *
 * Tasks that other processes run are not waited for (their handler may be a stand-in that never
 * ends); their follow-ups are the next drain's. Past the deadline the drain throws
 * DrainTimeoutError with what is left, so a handler that never returns or a task that keeps
 * re-enqueuing itself fails the test with a reason instead of hanging it.
 */
export class QueueDrainer {
  constructor(
    private readonly db: SqlExecutor,
    private readonly repo: DrainRepository,
    private readonly settler: DependencySettler,
    /** The worker of a queue (throws for a queue no handler of the app handles). */
    private readonly worker: (queue: string) => QueueWorker,
    /** Every queue the app handles. */
    private readonly handled: () => string[],
    /** Wakes the drained queues' parked workflows whose time came (`all`, with runDelayed: every sleeping one). */
    private readonly wakeWorkflows: (queues: string[], all: boolean) => Promise<unknown> = async () => undefined,
  ) {}

  async drain(options: DrainOptions = {}): Promise<DrainReport> {
    const queues = options.queue !== undefined ? [options.queue] : this.handled();
    const workers = queues.map((q) => this.worker(q));
    const runDelayed = options.runDelayed ?? false;
    const timeoutMs = options.timeoutMs ?? DEFAULT_DRAIN_TIMEOUT_MS;
    const deadline = Date.now() + timeoutMs;
    const ended = () => workers.reduce((n, w) => n + w.finished, 0);
    const timedOut = async () => new DrainTimeoutError(timeoutMs, await this.repo.left(this.db, queues, runDelayed));
    const start = ended();
    let pause = 5;
    for (;;) {
      const before = ended();
      if (runDelayed) await this.repo.runDelayedNow(this.db, queues);
      await this.wakeWorkflows(queues, runDelayed);
      await this.settler.request();
      for (const w of workers) if (!(await w.drain(deadline))) throw await timedOut();
      if (ended() > before || workers.some((w) => !w.idle)) {
        if (Date.now() >= deadline) throw await timedOut();
        pause = 5;
        continue;
      }
      const left = await this.repo.left(this.db, queues, runDelayed);
      if (!left.some((l) => l.unsettled > 0)) break;
      if (Date.now() >= deadline) throw new DrainTimeoutError(timeoutMs, left);
      await new Promise((resolve) => setTimeout(resolve, Math.min(pause, Math.max(0, deadline - Date.now()))));
      pause = Math.min(pause * 2, MAX_PAUSE_MS);
    }
    const undrained = options.queue !== undefined ? [] : await this.repo.undrained(this.db, queues, runDelayed);
    return { ran: ended() - start, undrained };
  }
}
