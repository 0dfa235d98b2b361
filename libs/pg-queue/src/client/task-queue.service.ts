import { Inject, Injectable } from '@nestjs/common';
import type { Observable } from 'rxjs';
import { InvalidArgumentError, InvalidEnqueueOptionsError } from '../errors';
import { TaskEvents } from '../observability/task-events';
import type { ResolvedModuleOptions } from '../pg-queue.options';
import { RESOLVED_OPTIONS } from '../pg-queue.tokens';
import { OperatorRepository, type TaskRow, type TaskState } from '../sql/operator.repository';
import { TaskRepository } from '../sql/task.repository';
import type { ChainStage, EnqueueItem, EnqueueOptions, QueueStats, SqlExecutor, TaskEvent } from '../types';
import { buildTaskRow, validateQueueName } from '../core/task-input';

const STATES: TaskState[] = ['pending', 'running', 'dead', 'done', 'cancelled'];

/** What `cancel()` did: cancelled at once (it was not running), requested (the running attempt
 * is being aborted and the task will end cancelled), or nothing (already finished, or unknown). */
export type CancelResult = 'cancelled' | 'requested' | 'not-cancellable';

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
    private readonly operator: OperatorRepository,
    private readonly taskEvents: TaskEvents,
  ) {}

  /** Task events of this process (claimed, completed, failed, dead, released, lease-lost). */
  get events$(): Observable<TaskEvent> {
    return this.taskEvents.events$;
  }

  /** Enqueues one task and returns its id. Validates everything before writing. */
  async enqueue<P>(queue: string, payload: P, options?: EnqueueOptions): Promise<string> {
    const { tx, ...rest } = options ?? {};
    const row = buildTaskRow(queue, payload, rest, this.rowLimits);
    const [id] = await this.repo.insert(this.executor(tx), [row]);
    return id;
  }

  /** Enqueues many tasks in one statement; ids come back in input order. All or nothing. */
  async enqueueMany(items: EnqueueItem[], options?: Pick<EnqueueOptions, 'tx'>): Promise<string[]> {
    if (!Array.isArray(items)) throw new InvalidEnqueueOptionsError('items', 'expected an array');
    const rows = items.map((item) => buildTaskRow(item?.queue, item?.payload, item?.options, this.rowLimits));
    return this.repo.insert(this.executor(options?.tx), rows);
  }

  /** One task by id, from the hot table or the archive. */
  get(id: string): Promise<TaskRow | null> {
    return this.operator.get(this.options.prisma, taskId(id));
  }

  /**
   * A page of tasks, newest first. Pass the last id of a page as `cursor` for the next one.
   * @example const page = await queue.list({ queue: 'email.send', state: 'dead', limit: 50 });
   */
  async list(filter: { queue?: string; state?: TaskState; cursor?: string; limit?: number } = {}): Promise<TaskRow[]> {
    if (filter.state !== undefined && !STATES.includes(filter.state)) {
      throw new InvalidArgumentError('state', `expected one of ${STATES.join(', ')}`);
    }
    const limit = filter.limit ?? 100;
    if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) throw new InvalidArgumentError('limit', 'expected an integer in [1, 10000]');
    return await this.operator.list(this.options.prisma, {
      queue: filter.queue === undefined ? null : validateQueueName(filter.queue),
      state: filter.state ?? null,
      cursor: filter.cursor === undefined ? null : taskId(filter.cursor),
      limit,
    });
  }

  /** Every stage of the pipeline `id` belongs to (root first), with states and timings. */
  async chain(id: string): Promise<ChainStage[]> {
    const rows = await this.operator.chain(this.options.prisma, taskId(id));
    return rows.map((r) => ({
      stage: r.stage,
      id: r.id,
      queue: r.queue,
      state: r.state,
      parentId: r.parent_id,
      attempt: r.attempt,
      createdAt: r.created_at,
      startedAt: r.started_at,
      finishedAt: r.finished_at,
      lastError: r.last_error,
    }));
  }

  /**
   * Cancels a task. Pending (or dead) → cancelled now. Running → its handler's signal fires and the
   * task ends cancelled whatever the attempt's outcome; in transactional mode its writes roll back.
   */
  async cancel(id: string): Promise<CancelResult> {
    const res = await this.operator.cancel(this.options.prisma, taskId(id));
    return res.cancelled > 0 ? 'cancelled' : res.requested > 0 ? 'requested' : 'not-cancellable';
  }

  /** Puts a dead or cancelled task back to pending with its attempts reset. */
  async retry(id: string): Promise<boolean> {
    return (await this.operator.retry(this.options.prisma, { ids: [taskId(id)], queue: null, errorLike: null })).length === 1;
  }

  /** Retries every dead or cancelled task of a queue, optionally only those whose error matches (ILIKE). */
  retryDead(filter: { queue: string; errorLike?: string }): Promise<string[]> {
    return this.operator.retry(this.options.prisma, { ids: null, queue: validateQueueName(filter.queue), errorLike: filter.errorLike ?? null });
  }

  /** Changes a pending task's priority (lower runs first); false when it is not pending. */
  setPriority(id: string, priority: number): Promise<boolean> {
    if (!Number.isInteger(priority) || Math.abs(priority) > 2_147_483_647) {
      throw new InvalidArgumentError('priority', 'expected a 32-bit integer');
    }
    return this.operator.setPriority(this.options.prisma, taskId(id), priority);
  }

  /** The seed's `select error_text, count(*) … group by 1 order by 2 desc`, for failing and dead tasks. */
  topErrors(queue: string, limit = 20) {
    return this.operator.topErrors(this.options.prisma, validateQueueName(queue), limit);
  }

  /**
   * Throughput and run time per hour and queue, over finished (archived) tasks since `since`
   * (default: the last 24 hours).
   */
  async hourly(filter: { queue?: string; since?: Date } = {}) {
    const since = filter.since ?? new Date(Date.now() - 86_400_000);
    if (!(since instanceof Date) || Number.isNaN(since.getTime())) throw new InvalidArgumentError('since', 'expected a valid Date');
    const rows = await this.operator.hourly(this.options.prisma, filter.queue === undefined ? null : validateQueueName(filter.queue), since);
    return rows.map((r) => ({ hour: r.hour, queue: r.queue, done: r.done, totalMs: r.total_ms, avgMs: r.avg_ms }));
  }

  /** Counts by state and the age of the oldest due task, per queue. */
  async stats(): Promise<QueueStats[]> {
    const rows = await this.operator.stats(this.options.prisma);
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

  private get rowLimits() {
    return { maxPayloadBytes: this.options.maxPayloadBytes };
  }
}

function taskId(id: unknown): string {
  if (typeof id !== 'string' || !/^[1-9][0-9]{0,18}$/.test(id)) throw new InvalidArgumentError('id', `expected a task id, got ${JSON.stringify(id)}`);
  return id;
}
