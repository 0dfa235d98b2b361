import { Inject, Injectable } from '@nestjs/common';
import type { Observable } from 'rxjs';
import { InvalidArgumentError, InvalidEnqueueOptionsError } from '../errors';
import { TaskEvents } from '../observability/task-events';
import { currentTraceContext } from '../observability/tracing';
import type { ResolvedModuleOptions } from '../pg-queue.options';
import { RESOLVED_OPTIONS } from '../pg-queue.tokens';
import { OperatorRepository } from '../sql/operator.repository';
import { TaskRepository } from '../sql/task.repository';
import { WatchRepository } from '../sql/watch.repository';
import type { ChainStage, EnqueueItemOf, EnqueueOptions, PayloadOf, QueueStats, SqlExecutor, TaskEvent, TaskInfo, TaskLogEntry } from '../types';
import { buildTaskRow, checkEnqueueManyKeys, validateQueueName } from '../core/task-input';
import { TASK_STATES } from '../core/task-states';
import { LIST_FILTER_KEYS, filterObject, rowLimit, taskId, type ListFilter } from './arguments';
import { QueueOperations } from './queue-operations';
import { statsByQueue } from './task-info';
import { toTaskInfo } from '../sql/task-fields';
import { taskLogs } from './task-logs';
import { waitForTask, waitTimeout, watchTasks, watchedQueues, type WaiterDeps, type WatchFilter, type WatchedTaskEvent, type WaitForOptions } from './task-waiter';
import { sendSignal, workflowOf } from './workflow.client';

export type { CancelResult } from './queue-operations';
export type { PauseScope } from './arguments';

/**
 * Enqueue, inspect and wait for tasks (the operator's actions are inherited from QueueOperations).
 * Pass `{ tx }` to join a Prisma interactive transaction: the task
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
export class TaskQueue extends QueueOperations {
  private readonly waiters: WaiterDeps;

  constructor(
    @Inject(RESOLVED_OPTIONS) options: ResolvedModuleOptions,
    private readonly repo: TaskRepository,
    operator: OperatorRepository,
    private readonly taskEvents: TaskEvents,
  ) {
    super(options, operator);
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

  /**
   * One task by id, from the hot table or the archive; a workflow's with its journal (`workflow`).
   * Always from the primary (`prisma`), even with `readPrisma`: it sees an enqueue or a change
   * that has just returned.
   */
  async get(id: string): Promise<TaskInfo | null> {
    const row = await this.operator.get(this.options.prisma, taskId(id));
    if (row === null) return null;
    const info = toTaskInfo(row);
    const workflow = workflowOf(row);
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
   * A page of tasks, newest first. Pass the last id of a page as `cursor` for the next one. From
   * `readPrisma` (a replica, when given: as old as its replication lag).
   * @example const page = await queue.list({ queue: 'email.send', state: 'dead', limit: 50 });
   */
  async list(filter: ListFilter = {}): Promise<TaskInfo[]> {
    filterObject(filter, LIST_FILTER_KEYS);
    if (filter.state !== undefined && !TASK_STATES.includes(filter.state)) {
      throw new InvalidArgumentError('state', `expected one of ${TASK_STATES.join(', ')}`);
    }
    const rows = await this.operator.list(this.options.readPrisma, {
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
      ...(r.journal !== null || r.waiting_for !== null ? { workflow: workflowOf(r) } : {}),
    }));
  }

  /** Task `id`'s result once it ends, run by any process (NOTIFY; needs databaseUrl): see task-waiter.ts. */
  async waitFor<T = unknown>(id: string, options: WaitForOptions = {}): Promise<T> {
    return (await waitForTask(this.waiters, taskId(id), waitTimeout(options))) as T;
  }

  /** Ends and failed attempts of the tasks of `queue` (default: all), from every process (see task-waiter.ts). */
  watch(filter: WatchFilter = {}): Observable<WatchedTaskEvent> {
    return watchTasks(this.waiters, watchedQueues(filter));
  }

  /**
   * Exact counts by state, the archive's included, and the age of the oldest due task, per queue.
   * It reads every task row, so its cost grows with history: for operators, not for polling
   * (QueueMetrics reads a bounded statement of its own). From `readPrisma` (a replica, when given),
   * its pauses and back-offs too: one consistent picture, as old as the replica (pausedQueues() and
   * backOffs() read the primary).
   */
  async stats(): Promise<QueueStats[]> {
    const reads = this.options.readPrisma;
    const [rows, pauses] = await Promise.all([this.operator.stats(reads), this.pauses.list(reads)]);
    // After, not beside: on the CLI's one connection a third statement in flight draws pg's deprecation warning.
    return statsByQueue(rows, pauses, await this.backOffRepo.list(reads));
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
