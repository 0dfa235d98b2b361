import { Inject, Injectable } from '@nestjs/common';
import type { Observable } from 'rxjs';
import { InvalidEnqueueOptionsError } from '../errors';
import { TaskHandlerRegistry } from '../discovery/task-handler.registry';
import { TaskEvents } from '../observability/task-events';
import type { ResolvedModuleOptions } from '../pg-queue.options';
import { RESOLVED_OPTIONS } from '../pg-queue.tokens';
import { TaskRepository, type TaskRow } from '../sql/task.repository';
import type { EnqueueItem, EnqueueOptions, QueueStats, SqlExecutor, TaskEvent } from '../types';
import { buildTaskRow } from './task-input';

/**
 * Enqueue and inspect tasks. Pass `{ tx }` to join a Prisma interactive transaction: the task
 * commits with the caller's business writes, or neither does (outbox).
 *
 * @example
 * ```ts
 * await prisma.$transaction(async (tx) => {
 *   const order = await tx.order.create({ data });
 *   await queue.enqueue('order.confirm', { orderId: order.id }, { tx });
 * });
 * ```
 */
@Injectable()
export class TaskQueue {
  constructor(
    @Inject(RESOLVED_OPTIONS) private readonly options: ResolvedModuleOptions,
    private readonly repo: TaskRepository,
    private readonly registry: TaskHandlerRegistry,
    private readonly taskEvents: TaskEvents,
  ) {}

  /** Task events of this process (claimed, completed, failed, dead, released, lease-lost). */
  get events$(): Observable<TaskEvent> {
    return this.taskEvents.events$;
  }

  /** Enqueues one task and returns its id. Validates everything before writing. */
  async enqueue<P>(queue: string, payload: P, options?: EnqueueOptions): Promise<string> {
    const { tx, ...rest } = options ?? {};
    const row = buildTaskRow(queue, payload, rest, this.rowDefaults());
    const [id] = await this.repo.insert(this.executor(tx), [row]);
    return id;
  }

  /** Enqueues many tasks in one statement; ids come back in input order. All or nothing. */
  async enqueueMany(items: EnqueueItem[], options?: Pick<EnqueueOptions, 'tx'>): Promise<string[]> {
    if (!Array.isArray(items)) throw new InvalidEnqueueOptionsError('items', 'expected an array');
    const defaults = this.rowDefaults();
    const rows = items.map((item) => buildTaskRow(item?.queue, item?.payload, item?.options, defaults));
    return this.repo.insert(this.executor(options?.tx), rows);
  }

  /** One task by id, from the hot table or the archive. */
  get(id: string): Promise<TaskRow | null> {
    return this.repo.get(this.options.prisma, id);
  }

  /** Counts by state and the age of the oldest due task, per queue. */
  async stats(): Promise<QueueStats[]> {
    const rows = await this.repo.stats(this.options.prisma);
    const byQueue = new Map<string, QueueStats>();
    for (const r of rows) {
      let s = byQueue.get(r.queue);
      if (!s) {
        s = { queue: r.queue, pending: 0, running: 0, dead: 0, done: 0, cancelled: 0, oldestPendingMs: null };
        byQueue.set(r.queue, s);
      }
      s[r.state as 'pending'] += r.count;
      if (r.oldest_pending_ms !== null) s.oldestPendingMs = Math.max(s.oldestPendingMs ?? 0, r.oldest_pending_ms);
    }
    return [...byQueue.values()].sort((a, b) => a.queue.localeCompare(b.queue));
  }

  private executor(tx: unknown): SqlExecutor {
    if (tx === undefined) return this.options.prisma;
    const candidate = tx as Partial<SqlExecutor> | null;
    if (!candidate || typeof candidate.$queryRawUnsafe !== 'function') {
      throw new InvalidEnqueueOptionsError('tx', 'expected a Prisma transaction client');
    }
    return candidate as SqlExecutor;
  }

  /** @internal shared with handler contexts, so follow-ups get the same validation. */
  rowDefaults() {
    return {
      maxPayloadBytes: this.options.maxPayloadBytes,
      maxAttemptsFor: (queue: string) => this.registry.optionsFor(queue).maxAttempts,
    };
  }
}
