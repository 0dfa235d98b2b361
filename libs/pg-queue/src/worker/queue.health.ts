import { within } from '../core/within';
import type { OperatorRepository } from '../sql/operator.repository';
import type { PrismaClientLike } from '../types';
import type { WorkerStatus } from './queue.worker';

/** What a health check reads (see WorkerOrchestrator.health). */
export interface QueueHealth {
  database: { up: boolean; error: string | null };
  /**
   * 'poll-only' when no databaseUrl was given (no LISTEN connection by design); 'off' while no
   * listener runs in this process (workers not started, or shut down).
   */
  listen: 'connected' | 'disconnected' | 'poll-only' | 'off';
  workers: WorkerStatus[];
  /**
   * Per queue with live tasks: due (capped at 10 000), running, dead (capped), oldest due age in ms,
   * running instances handling it, and how long it has had due tasks and none (null: it has one, or nothing is due).
   */
  queues: {
    queue: string;
    due: number;
    running: number;
    dead: number;
    waiting: number;
    oldestDueMs: number | null;
    handlers: number;
    unhandledMs: number | null;
    /** Paused as a whole (TaskQueue.pause): its due tasks wait by design. */
    paused: boolean;
    /** Partitions paused on their own. */
    pausedPartitions: number;
    /** Cooling down as a whole or through its limiter (a handler's RateLimitedError): its due tasks wait by design until it ends. */
    coolingDown: boolean;
  }[];
}

/**
 * The queues' figures from the database (the metrics statement: index probes only), within
 * `databaseTimeoutMs`: a database that does not answer is reported as down, with this process's
 * own state (`local`) either way.
 */
export async function readQueueHealth(
  operator: OperatorRepository,
  prisma: PrismaClientLike,
  databaseTimeoutMs: number,
  local: Pick<QueueHealth, 'listen' | 'workers'>,
): Promise<QueueHealth> {
  try {
    const rows = await within(operator.metrics(prisma), databaseTimeoutMs, null);
    if (rows === null) return { database: { up: false, error: `no answer within ${databaseTimeoutMs} ms` }, ...local, queues: [] };
    const queues = rows.map((r) => ({
      queue: r.queue,
      due: r.due,
      running: r.running,
      dead: r.dead,
      waiting: r.waiting,
      oldestDueMs: r.oldest_due_ms,
      handlers: r.handlers,
      unhandledMs: r.unhandled_ms,
      paused: r.paused,
      pausedPartitions: r.paused_partitions,
      coolingDown: r.backed_off,
    }));
    return { database: { up: true, error: null }, ...local, queues };
  } catch (err) {
    return { database: { up: false, error: (err as Error).message }, ...local, queues: [] };
  }
}
