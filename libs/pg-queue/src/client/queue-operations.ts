import type { ResolvedModuleOptions } from '../pg-queue.options';
import { DependenciesNotDoneError, InvalidArgumentError } from '../errors';
import { OperatorRepository } from '../sql/operator.repository';
import { PauseRepository, type QueuePause } from '../sql/pause.repository';
import { BackOffRepository, type Cooldown } from '../sql/backoff.repository';
import { LimiterRepository, type LimiterBudget } from '../sql/limiter.repository';
import type { PayloadOf } from '../types';
import { validateQueueName } from '../core/task-input';
import { isPriority } from '../core/task-rules';
import { ScheduleClient, type RuntimeScheduleOptions, type ScheduleInfo } from './schedules.client';
import { TaskChanges, type RescheduleTo, type TaskChangeResult } from './task-changes';
import {
  HOURLY_FILTER_KEYS, PURGE_FILTER_KEYS, RETRY_DEAD_FILTER_KEYS,
  filterObject, pauseScope, rowLimit, shown, taskId,
  type HourlyFilter, type PauseScope, type PurgeFilter, type RetryDeadFilter,
} from './arguments';

/** What `cancel()` did: cancelled at once (it was not running), requested (the running attempt
 * is being aborted and the task will end cancelled), or nothing (already finished, or unknown). */
export type CancelResult = 'cancelled' | 'requested' | 'not-cancellable';

/**
 * The operator's actions, which TaskQueue inherits: on one task (cancel, retry, priority, due
 * time, payload), on a queue's history (retryDead, purge, topErrors, hourly), on a queue's flow
 * (pause, resume) and on runtime schedules. Each checks its arguments and runs one statement or
 * bounded transaction of the operator's repositories. Reads that count or list (topErrors, hourly,
 * listSchedules) go to `readPrisma` (a replica, when the app gives one); reads by id or name, the
 * pauses and every change go to `prisma`, the primary (see the README's Reads from a replica).
 */
export abstract class QueueOperations {
  protected readonly pauses: PauseRepository;
  protected readonly backOffRepo: BackOffRepository;
  private readonly limiters: LimiterRepository;
  private readonly schedules: ScheduleClient;
  private readonly changes: TaskChanges;

  constructor(
    protected readonly options: ResolvedModuleOptions,
    protected readonly operator: OperatorRepository,
  ) {
    this.pauses = new PauseRepository(options.schema);
    this.backOffRepo = new BackOffRepository(options.schema);
    this.limiters = new LimiterRepository(options.schema, options.limiters);
    this.schedules = new ScheduleClient(options.prisma, options.schema, options.readPrisma);
    this.changes = new TaskChanges(options.prisma, operator, options.maxPayloadBytes);
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

  /** The seed's `select error_text, count(*) … group by 1 order by 2 desc`, for failing and dead tasks. */
  async topErrors(queue: string, limit = 20): Promise<{ error: string; count: number; dead: number; lastSeen: Date }[]> {
    const rows = await this.operator.topErrors(this.options.readPrisma, validateQueueName(queue), rowLimit(limit));
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
    const rows = await this.operator.hourly(this.options.readPrisma, filter.queue === undefined ? null : validateQueueName(filter.queue), since);
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

  /**
   * The cooldowns in force (handlers' RateLimitedError): queues, partitions and named limiters
   * that no instance claims from until `until`, by name.
   */
  async cooldowns(): Promise<Cooldown[]> {
    return this.backOffRepo.list(this.options.prisma);
  }

  /** @deprecated Renamed cooldowns(); this name goes in the next release. */
  async backOffs(): Promise<Cooldown[]> {
    return this.cooldowns();
  }

  /**
   * Each named limiter of the module option `limiters` with its budget and what is in use now, on
   * every instance: running tasks of its queues, starts in its rate window, its back-off's end.
   */
  async limiterBudgets(): Promise<LimiterBudget[]> {
    return this.limiters.budgets(this.options.prisma);
  }

  /**
   * Every pause: queues (`partition` null) and partitions, by queue name. From the primary even with
   * `readPrisma`: a pause just made or lifted shows at once (queue_pause is a tiny table).
   */
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
}
