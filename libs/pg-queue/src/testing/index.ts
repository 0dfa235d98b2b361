import type { INestApplicationContext } from '@nestjs/common';
import { DEFAULT_CONNECTION, registrationToken } from '../pg-queue.connections';
import type { DrainReport } from '../worker/queue.drainer';
import type { PruneResult } from '../worker/retention.pruner';
import type { WorkerOrchestrator } from '../worker/worker.orchestrator';

/** The orchestrator of the PgQueueModule registration named `connection`. */
function orchestrator(app: INestApplicationContext, connection: string): WorkerOrchestrator {
  return app.get(registrationToken(connection, 'orchestrator'), { strict: false });
}

export { DrainTimeoutError } from '../worker/queue.drainer';
export type { DrainReport, PruneResult };

/** Options of `drainQueue(app, options)`. */
export interface DrainQueueOptions {
  /** Drain this queue only (default: every queue a handler of this app handles). */
  queue?: string;
  /** The PgQueueModule registration (default: the default one). */
  connection?: string;
  /**
   * Also run what is due later, now: pending tasks of the drained queues that wait for their
   * `delayMs` or for a retry's backoff are made due at the start of every round, so a handler that
   * fails twice is retried twice within one drain. Default false: such tasks are left alone.
   */
  runDelayed?: boolean;
  /**
   * The longest the drain may take, in ms (default 30 000): past it, it rejects with a
   * DrainTimeoutError that says per queue what is left (a handler of this app that does not
   * return, tasks that keep re-enqueuing themselves with runDelayed, ...).
   */
  timeoutMs?: number;
}

/**
 * Runs every due task of `queue` (or of every queue handled in this app) inline, including the
 * follow-ups and dependants they lead to, until the drained queues are quiet; returns how many
 * attempts ran. Tests await it instead of sleeping. It also waits for the tasks this app's own
 * workers (autoStart) hold in those queues, not for those other processes run. Tasks delayed into
 * the future are left alone, unless `runDelayed` is set. Like every helper here it acts on the
 * default PgQueueModule registration, or on the one named `connection`.
 *
 * With an options object it returns a report instead of a number: `ran` (the count), and, when no
 * queue is named, `undrained`: the queues with due tasks (any pending ones, with runDelayed) that
 * no handler of this app handles (tasks meant for another service, or a handler missing from the
 * test's module).
 *
 * @example
 * ```ts
 * const app = await Test.createTestingModule({ imports: [AppModule] }).compile();
 * await app.init();
 * await orders.create({ ... });
 * await drainQueue(app);
 * expect(await prisma.order.findFirst()).toMatchObject({ status: 'emailed' });
 *
 * const { ran, undrained } = await drainQueue(app, { runDelayed: true }); // retries too, without their backoff
 * expect(undrained).toEqual([]);
 * ```
 */
export function drainQueue(app: INestApplicationContext, queue?: string, connection?: string): Promise<number>;
export function drainQueue(app: INestApplicationContext, options: DrainQueueOptions): Promise<DrainReport>;
export function drainQueue(app: INestApplicationContext, queueOrOptions?: string | DrainQueueOptions, connection = DEFAULT_CONNECTION): Promise<number | DrainReport> {
  if (typeof queueOrOptions === 'object' && queueOrOptions !== null) {
    const { connection: named = DEFAULT_CONNECTION, ...options } = queueOrOptions;
    return orchestrator(app, named).drainWith(options);
  }
  return orchestrator(app, connection).drain(queueOrOptions);
}

/** Returns tasks whose lease expired to the queue now, instead of waiting for the rescuer. */
export function rescueExpiredLeases(app: INestApplicationContext, connection = DEFAULT_CONNECTION): Promise<{ rescued: number; dead: number }> {
  return orchestrator(app, connection).rescueExpired();
}

/**
 * Wakes parked workflows now instead of at their time: every sleep (`wf.sleep`, `wf.sleepUntil`)
 * and every signal wait with a timeout of the app's queues (or of `queue`) ends now, as if its time
 * had come; returns how many workflows. Then `drainQueue(app)` runs them on.
 */
export function wakeWorkflows(app: INestApplicationContext, queue?: string, connection = DEFAULT_CONNECTION): Promise<number> {
  return orchestrator(app, connection).wakeWorkflows(queue);
}

/** Enqueues the due ticks of every schedule now, as the ticker would on time. */
export function tickSchedules(app: INestApplicationContext, connection = DEFAULT_CONNECTION): Promise<number> {
  return orchestrator(app, connection).tickSchedules();
}

/**
 * Runs a retention round now: drops archive partitions past retention.archiveMs (creating the
 * coming ones), deletes dead and cancelled tasks past retention.deadMs. See PruneResult for what
 * is counted and what estimated.
 */
export function pruneHistory(app: INestApplicationContext, connection = DEFAULT_CONNECTION): Promise<PruneResult> {
  return orchestrator(app, connection).pruneHistory();
}
