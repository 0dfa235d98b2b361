import type { TaskHandlerRegistry } from '../discovery/task-handler.registry';
import { PgQueueError } from '../errors';
import { QueueWorker, type WorkerStatus } from './queue.worker';
import type { WorkerDeps } from './worker.deps';

/** This process's worker loops: one per registered queue, created on first use. */
export class WorkerSet {
  private readonly workers = new Map<string, QueueWorker>();

  constructor(
    private readonly registry: TaskHandlerRegistry,
    private readonly deps: WorkerDeps,
    /** Current fallback poll period (longer while LISTEN is healthy). */
    private readonly pollIntervalMs: () => number,
  ) {}

  /** The worker of `queue`, created if need be; throws when this process has no handler for it. */
  get(queue: string): QueueWorker {
    let w = this.workers.get(queue);
    if (!w) {
      const handler = this.registry.get(queue);
      if (!handler) throw new PgQueueError(`pg-queue: no handler for queue "${queue}" in this process`);
      w = new QueueWorker(handler, this.deps, this.pollIntervalMs);
      this.workers.set(queue, w);
    }
    return w;
  }

  /** The worker of `queue` if one was created (a notice for another process's queue finds none). */
  find(queue: string): QueueWorker | undefined {
    return this.workers.get(queue);
  }

  all(): QueueWorker[] {
    return [...this.workers.values()];
  }

  wakeAll(): void {
    for (const w of this.workers.values()) w.wake();
  }

  /** A running task was cancelled somewhere: abort its handler if it runs in this process. */
  cancel(taskId: string): boolean {
    return this.all().some((w) => w.cancel(taskId));
  }

  statuses(): WorkerStatus[] {
    return this.all().map((w) => w.status());
  }

  stop(deadline: number): Promise<void> {
    return Promise.all(this.all().map((w) => w.stop(deadline))).then(() => undefined);
  }
}
