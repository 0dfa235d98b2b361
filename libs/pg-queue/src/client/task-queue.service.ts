import { sendSignal, workflowInfo } from './workflow.client';
import { Inject, Injectable } from '@nestjs/common';
import type { Observable } from 'rxjs';
import { DependenciesNotDoneError, InvalidArgumentError, InvalidEnqueueOptionsError } from '../errors';
import { TaskEvents } from '../observability/task-events';
import { currentTraceContext } from '../observability/tracing';
import type { ResolvedModuleOptions } from '../pg-queue.options';
import { RESOLVED_OPTIONS } from '../pg-queue.tokens';
import { OperatorRepository, type TaskState } from '../sql/operator.repository';
import { PauseRepository, type QueuePause } from '../sql/pause.repository';
import { statsByQueue, toTaskInfo } from './task-info';
import { ScheduleClient, type RuntimeScheduleOptions, type ScheduleInfo } from './schedules.client';
import { taskLogs } from './task-logs';
import { WatchRepository } from '../sql/watch.repository';
import { TaskChanges, type RescheduleTo, type TaskChangeResult } from './task-changes';
import { waitForTask, waitTimeout, watchTasks, watchedQueues, type WaiterDeps, type WatchFilter, type WatchedTaskEvent, type WaitForOptions } from './task-waiter';
import { TaskRepository } from '../sql/task.repository';
import type { ChainStage, EnqueueItemOf, EnqueueOptions, PayloadOf, QueueStats, SqlExecutor, TaskEvent, TaskInfo, TaskLogEntry } from '../types';
import { buildTaskRow, checkEnqueueManyKeys, validateQueueName } from '../core/task-input';
import { TASK_STATES } from '../core/task-states';
import { isPriority, isTaskId } from '../core/task-rules';


/** What `cancel()` did: cancelled at once (it was not running), requested (the running attempt
 * is being aborted and the task will end cancelled), or nothing (already finished, or unknown). */
export type CancelResult = 'cancelled' | 'requested' | 'not-cancellable';

import {
  HOURLY_FILTER_KEYS, LIST_FILTER_KEYS, PURGE_FILTER_KEYS, RETRY_DEAD_FILTER_KEYS,
  filterObject, pauseScope, rowLimit, shown, taskId,
  type HourlyFilter, type ListFilter, type PauseScope, type PurgeFilter, type RetryDeadFilter,
} from './arguments';

export type { PauseScope } from './arguments';

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
  private readonly pauses: PauseRepository;
  private readonly schedules: ScheduleClient;
  private readonly waiters: WaiterDeps;
  private readonly changes: TaskChanges;

  constructor(
    @Inject(RESOLVED_OPTIONS) private readonly options: ResolvedModuleOptions,
    private readonly repo: TaskRepository,
    private readonly operator: OperatorRepository,
    private readonly taskEvents: TaskEvents,
  ) {
    this.pauses = new PauseRepository(options.schema);
    this.schedules = new ScheduleClient(options.prisma, options.schema);
    this.changes = new TaskChanges(options.prisma, operator, options.maxPayloadBytes);
    this.waiters = { prisma: options.prisma, operator, watch: new WatchRepository(options.schema), notices: taskEvents.notices };
  }

  /** Task events of this process (claimed, completed, failed, dead, released, lease-lost, progress). */
  get events$(): Observable<TaskEvent> {
    return this.taskEvents.events$;
  }

  /**
   * Enqueues one task and returns its id. Validates everything before writing. The payload's type
   * follows the queue name when the app declares it in QueuePayloads.
   */
  async enqueue<Q extends string>(queue: Q, payload: PayloadOf<Q>, options?: EnqueueOptions): Promise<string> {
    const { tx, ...rest } = options ?? {};
    const row = buildTaskRow(queue, payload, rest, this.rowLimits, null, currentTraceContext());
    const [id] = await this.repo.insert(this.executor(tx), [row]);
    return id;
  }

  /**
   * Enqueues many tasks in one statement; ids come back in input order. All or nothing. Each
   * item's payload type follows its queue name when the app declares it in QueuePayloads.
   */
  async enqueueMany<const Q extends readonly string[]>(items: { [K in keyof Q]: EnqueueItemOf<Q[K]> }, options?: Pick<EnqueueOptions, 'tx'>): Promise<string[]> {
    if (!Array.isArray(items)) throw new InvalidEnqueueOptionsError('items', 'expected an array');
    checkEnqueueManyKeys(items, options);
    const traceContext = currentTraceContext();
    const rows = items.map((item) => buildTaskRow(item?.queue, item?.payload, item?.options, this.rowLimits, null, traceContext));
    return this.repo.insert(this.executor(options?.tx), rows);
  }

  /** One task by id, from the hot table or the archive; a workflow's with its journal (`workflow`). */
  async get(id: string): Promise<TaskInfo | null> {
    const row = await this.operator.get(this.options.prisma, taskId(id));
    if (row === null) return null;
    const info = toTaskInfo(row);
    const workflow = await workflowInfo(this.options.prisma, this.repo.workflows, id);
    return workflow === undefined ? info : { ...info, workflow };
  }

  /** Task `id`'s log (ctx.log lines, failed attempts), oldest first; null when there is no such task. */
  getLogs(id: string): Promise<TaskLogEntry[] | null> {
    return taskLogs(this.options.prisma, this.repo.reports, taskId(id));
  }

  /**
   * Sends signal `name` to workflow `id`: delivered to its `wf.waitForSignal(name)`, each signal
   * once and in order, and kept until a wait takes it. With `{ tx }` it is sent only if that
   * transaction commits. Throws SignalTargetError when the task does not exist or has finished.
   */
  signal(id: string, name: string, payload?: unknown, options?: { tx?: unknown }): Promise<string> {
    const tx = options?.tx === undefined ? null : this.executor(options.tx);
    return sendSignal(this.options.prisma, this.repo.workflows, tx, taskId(id), name, payload, this.options.maxPayloadBytes);
  }

  /**
   * A page of tasks, newest first. Pass the last id of a page as `cursor` for the next one.
   * @example const page = await queue.list({ queue: 'email.send', state: 'dead', limit: 50 });
   */
  async list(filter: ListFilter = {}): Promise<TaskInfo[]> {
    filterObject(filter, LIST_FILTER_KEYS);
    if (filter.state !== undefined && !TASK_STATES.includes(filter.state)) {
      throw new InvalidArgumentError('state', `expected one of ${TASK_STATES.join(', ')}`);
    }
    const rows = await this.operator.list(this.options.prisma, {
      queue: filter.queue === undefined ? null : validateQueueName(filter.queue),
      state: filter.state ?? null,
      cursor: filter.cursor === undefined ? null : taskId(filter.cursor, 'cursor'),
      limit: rowLimit(filter.limit ?? 100),
    });
    return rows.map(toTaskInfo);
  }

  /**
   * Every task of the pipeline or dependency graph `id` belongs to, roots first (stage 0), then
   * their children and dependants by stage, with states, timings and dependencies.
   */
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
      dependsOn: r.depends_on,
    }));
  }

  /**
   * Cancels a task. Pending, waiting (or dead) → cancelled now, and so are the tasks that depend on it. Running → its handler's signal fires and the
   * task ends cancelled whatever the attempt's outcome; in transactional mode its writes roll back.
   */
  async cancel(id: string): Promise<CancelResult> {
    const res = await this.operator.cancel(this.options.prisma, taskId(id));
    return res.cancelled > 0 ? 'cancelled' : res.requested > 0 ? 'requested' : 'not-cancellable';
  }

  /**
   * Puts a dead or cancelled task back to pending with its attempts reset; false when it is in
   * neither state (or a newer task holds its key). A dependant cancelled because a parent ended
   * dead or cancelled lacks that parent's result: it is refused with `DependenciesNotDoneError`.
   */
  async retry(id: string): Promise<boolean> {
    const res = await this.operator.retry(this.options.prisma, { ids: [taskId(id)], queue: null, errorLike: null, states: ['dead', 'cancelled'] });
    const [refused] = res.refused;
    if (refused) throw new DependenciesNotDoneError(refused.id, refused.parents);
    return res.retried.length === 1;
  }

  /**
   * Retries every dead task of a queue, optionally only those whose error matches (ILIKE).
   * Cancelled tasks stay as they are: each comes back only by its own `retry(id)`.
   */
  async retryDead(filter: RetryDeadFilter): Promise<string[]> {
    filterObject(filter, RETRY_DEAD_FILTER_KEYS);
    const queue = validateQueueName(filter.queue);
    const errorLike = filter.errorLike ?? null;
    // Postgres text cannot hold U+0000; the driver would fail mid-call with "invalid byte sequence".
    if (errorLike !== null && (typeof errorLike !== 'string' || errorLike.includes('\u0000'))) {
      throw new InvalidArgumentError('errorLike', `expected an ILIKE pattern string without U+0000, got ${shown(errorLike)}`);
    }
    return (await this.operator.retry(this.options.prisma, { ids: null, queue, errorLike, states: ['dead'] })).retried;
  }

  /**
   * Deletes finished history for good: tasks in `states` (done, cancelled, dead) that finished more
   * than `olderThanMs` ago, of one queue or all. Pending and running tasks are never touched.
   * Returns how many were deleted. In batches of 5 000, each its own statement.
   */
  async purge(filter: PurgeFilter): Promise<number> {
    filterObject(filter, PURGE_FILTER_KEYS);
    const queue = filter.queue === undefined ? null : validateQueueName(filter.queue);
    const finished = ['done', 'cancelled', 'dead'];
    if (!Array.isArray(filter.states) || filter.states.length === 0 || filter.states.some((s) => !finished.includes(s))) {
      throw new InvalidArgumentError('states', `expected a non-empty list of ${finished.join(', ')}, got ${shown(filter.states)}`);
    }
    const age = filter.olderThanMs;
    if (typeof age !== 'number' || !Number.isInteger(age) || age < 0 || age > 100 * 365 * 86_400_000) {
      throw new InvalidArgumentError('olderThanMs', `expected an integer of ms from 0 to 100 years, got ${shown(age)}`);
    }
    const states = [...new Set(filter.states)];
    for (let total = 0; ; ) {
      const deleted = await this.operator.purge(this.options.prisma, { queue, states, olderThanMs: age }, 5000);
      total += deleted;
      if (deleted === 0) return total;
    }
  }

  /** Changes a pending task's priority (lower runs first); false when it is not pending. */
  async setPriority(id: string, priority: number): Promise<boolean> {
    if (!isPriority(priority)) {
      throw new InvalidArgumentError('priority', `expected a 32-bit integer, got ${shown(priority)}`);
    }
    return this.operator.setPriority(this.options.prisma, taskId(id), priority);
  }

  /** Runs a pending task now, waking its workers; refused, with the reason, otherwise (see TaskChangeResult). */
  async promote(id: string): Promise<TaskChangeResult> {
    return this.changes.promote(taskId(id));
  }

  /** Moves a pending task's due time (`{ runAt }` or `{ delayMs }` from now); refused as `promote` is. */
  async reschedule(id: string, to: RescheduleTo): Promise<TaskChangeResult> {
    return this.changes.reschedule(taskId(id), to);
  }

  /** Replaces the payload of a task not started yet (pending, or waiting for dependencies); never while it runs. */
  async updatePayload<Q extends string = string>(id: string, payload: PayloadOf<Q>): Promise<TaskChangeResult> {
    return this.changes.updatePayload(taskId(id), payload);
  }

  /** Task `id`'s result once it ends, run by any process (NOTIFY; needs databaseUrl): see task-waiter.ts. */
  async waitFor<T = unknown>(id: string, options: WaitForOptions = {}): Promise<T> {
    return (await waitForTask(this.waiters, taskId(id), waitTimeout(options))) as T;
  }

  /** Ends and failed attempts of the tasks of `queue` (default: all), from every process (see task-waiter.ts). */
  watch(filter: WatchFilter = {}): Observable<WatchedTaskEvent> {
    return watchTasks(this.waiters, watchedQueues(filter));
  }

  /** The seed's `select error_text, count(*) … group by 1 order by 2 desc`, for failing and dead tasks. */
  async topErrors(queue: string, limit = 20): Promise<{ error: string; count: number; dead: number; lastSeen: Date }[]> {
    const rows = await this.operator.topErrors(this.options.prisma, validateQueueName(queue), rowLimit(limit));
    return rows.map((r) => ({ error: r.error, count: r.count, dead: r.dead, lastSeen: r.last_seen }));
  }

  /**
   * Throughput and run time per hour and queue, over finished (archived) tasks since `since`
   * (default: the last 24 hours).
   */
  async hourly(filter: HourlyFilter = {}) {
    filterObject(filter, HOURLY_FILTER_KEYS);
    const since = filter.since ?? new Date(Date.now() - 86_400_000);
    // Outside years 1-9999 toISOString writes "+010000-…" or "-000001-…", which Postgres cannot read.
    const year = since instanceof Date ? since.getUTCFullYear() : NaN;
    if (!(year >= 1 && year <= 9999)) throw new InvalidArgumentError('since', 'expected a valid Date between the years 1 and 9999');
    const rows = await this.operator.hourly(this.options.prisma, filter.queue === undefined ? null : validateQueueName(filter.queue), since);
    return rows.map((r) => ({ hour: r.hour, queue: r.queue, done: r.done, totalMs: r.total_ms, avgMs: r.avg_ms }));
  }

  /**
   * Pauses a queue (or one partition of it, `{ partition }`) on every instance, those started
   * later included, until `resume`: no task of it is claimed, while enqueue goes on and the tasks
   * already running finish. Stored in the database (it survives restarts). Resolves once no claim
   * of the queue can still take a task (it waits for the claims in flight, see pause.sql.ts).
   * True when this call paused it, false when it already was.
   */
  async pause(queue: string, scope: PauseScope = {}): Promise<boolean> {
    return this.pauses.pause(this.options.prisma, validateQueueName(queue), pauseScope(scope));
  }

  /**
   * Undoes `pause` (the same scope: a queue's resume does not resume partitions paused on their
   * own). The queue's workers on every instance are woken by NOTIFY and claim at once. True when
   * this call resumed it, false when it was not paused.
   */
  async resume(queue: string, scope: PauseScope = {}): Promise<boolean> {
    return this.pauses.resume(this.options.prisma, validateQueueName(queue), pauseScope(scope));
  }

  /** Every pause: queues (`partition` null) and partitions, by queue name. */
  async pausedQueues(): Promise<QueuePause[]> {
    return this.pauses.list(this.options.prisma);
  }

  /**
   * Creates (true) or changes a schedule at run time, stored in the database and ticked once per
   * tick across instances (see schedules.client.ts). A declared name: ScheduleNameTakenError.
   */
  upsertSchedule(name: string, options: RuntimeScheduleOptions): Promise<boolean> {
    return this.schedules.upsert(name, options);
  }

  /** One schedule or every one (declared and runtime, `declared` says which), by name. */
  getSchedule(name: string): Promise<ScheduleInfo | null> {
    return this.schedules.get(name);
  }

  listSchedules(): Promise<ScheduleInfo[]> {
    return this.schedules.list();
  }

  /** Removes a runtime schedule everywhere; false when none had the name. */
  removeSchedule(name: string): Promise<boolean> {
    return this.schedules.remove(name);
  }

  /**
   * Exact counts by state, the archive's included, and the age of the oldest due task, per queue.
   * It reads every task row, so its cost grows with history: for operators, not for polling
   * (QueueMetrics reads a bounded statement of its own).
   */
  async stats(): Promise<QueueStats[]> {
    const [rows, pauses] = await Promise.all([this.operator.stats(this.options.prisma), this.pauses.list(this.options.prisma)]);
    return statsByQueue(rows, pauses);
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
