import type { WorkflowInfo } from './workflow/workflow.types';

/**
 * The structural slice of a PrismaClient the library needs. Any PrismaClient (with the
 * `@prisma/adapter-pg` driver adapter) satisfies it, so the library never imports generated code.
 */
export interface SqlExecutor {
  $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): PromiseLike<T>;
  $executeRawUnsafe(query: string, ...values: unknown[]): PromiseLike<number>;
}

/** A rate limit (see HandlerOptions.rateLimit). */
export interface RateLimit {
  max: number;
  perMs: number;
  /** The limit holds for each partition on its own (default false: for the queue as a whole). */
  perPartition?: boolean;
}

export interface TransactionOptionsLike {
  maxWait?: number;
  timeout?: number;
  /** Prisma's name of the level; the queue only ever asks for READ COMMITTED. */
  isolationLevel?: 'ReadCommitted';
}

export interface PrismaClientLike extends SqlExecutor {
  $transaction<R>(fn: (tx: any) => Promise<R>, options?: TransactionOptionsLike): Promise<R>;
  $disconnect(): Promise<void>;
}

/**
 * Payload types by queue name, for the app to declare once (module augmentation); enqueue,
 * ctx.enqueue and a handler's `Task<P>` then follow from the queue name:
 *
 * @example
 * ```ts
 * declare module '@pg-queue/nestjs' {
 *   interface QueuePayloads {
 *     'order.confirm': { orderId: number };
 *   }
 * }
 * ```
 * Queues not declared here take any payload (`unknown` at enqueue, `any` in the handler).
 */
export interface QueuePayloads {}

/** The payload type enqueue accepts for queue `Q` (see QueuePayloads). */
export type PayloadOf<Q extends string> = Q extends keyof QueuePayloads ? QueuePayloads[Q] : unknown;

/** The payload type a handler of queue `Q` receives (see QueuePayloads). */
export type HandlerPayloadOf<Q extends string> = Q extends keyof QueuePayloads ? QueuePayloads[Q] : any;

/** Where a task stands: live (pending, waiting for its dependencies, running, dead) or finished (done, cancelled; archived). */
export type TaskState = 'pending' | 'waiting' | 'running' | 'dead' | 'done' | 'cancelled';

/** A task as the operator API returns it (`get`, `list`), live or archived. */
export interface TaskInfo {
  id: string;
  queue: string;
  state: TaskState;
  payload: unknown;
  priority: number;
  runAt: Date;
  attempt: number;
  /** The attempt limit in force: the enqueuer's, or the one its last claim took from the handler; null before a first claim when the handler decides. */
  maxAttempts: number | null;
  lastError: string | null;
  /** The worker holding the lease, while running. */
  lockedBy: string | null;
  lockedUntil: Date | null;
  parentId: string | null;
  /** The dedup key (enqueue option `key`). */
  key: string | null;
  /** The enqueue option `group`. */
  group: string | null;
  /** The enqueue option `tags`, or null. */
  tags: string[] | null;
  createdAt: Date;
  startedAt: Date | null;
  finishedAt: Date | null;
  /** The tasks it waits for or waited for (enqueue option dependsOn), or null. */
  dependsOn: string[] | null;
  /** Tasks that depend on it. */
  dependants: string[] | null;
  /** While `waiting`: how many of dependsOn are not done yet. */
  dependenciesLeft: number | null;
  /** What its handler returned (done tasks, archived), or null. */
  result: unknown;
  /** The last value its handlers reported with `ctx.progress`, or null. */
  progress: unknown;
  /** A workflow's journal and what it waits for (`get` only; absent for other tasks). */
  workflow?: WorkflowInfo;
}

/**
 * An entry of a task's log (`TaskQueue.getLogs`): a line a handler wrote with `ctx.log` (`log`),
 * or a failed attempt (`error`: its error text, and in `durationMs` how long it ran).
 */
export interface TaskLogEntry {
  at: Date;
  /** The attempt that wrote it. */
  attempt: number;
  kind: 'log' | 'error';
  message: string;
  /** `error` entries: the attempt's run time (for a lost lease: since its claim); null otherwise. */
  durationMs: number | null;
}

/** A claimed task as the handler sees it. */
export interface Task<P = unknown> {
  /** bigint id, as a string. */
  readonly id: string;
  readonly queue: string;
  readonly payload: P;
  /** 1 on the first attempt; counted when the task was claimed. */
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly priority: number;
  readonly runAt: Date;
  readonly createdAt: Date;
  /** The task whose handler enqueued this one, if any. */
  readonly parentId: string | null;
}

export type HandlerMode = 'transactional' | 'lease';

export interface BackoffOptions {
  type: 'fixed' | 'linear' | 'exponential';
  /** Delay after the first failure. */
  delayMs: number;
  /** Upper bound for any delay. */
  maxDelayMs?: number;
  /** Spread retries over [delay/2, delay] so failing tasks do not retry in lockstep. */
  jitter?: boolean;
}

/** Options for one enqueue. */
export interface EnqueueOptions<TTx = unknown> {
  /**
   * A Prisma transaction client: the insert joins that transaction and commits (or rolls back)
   * with the caller's business writes. Without it the insert commits on its own.
   */
  tx?: TTx;
  /** Do not run before this instant. */
  runAt?: Date;
  /** Do not run before now + delayMs (database clock). Ignored when runAt is given. */
  delayMs?: number;
  /** Lower runs first. Default 0. */
  priority?: number;
  /**
   * Set only to override the handler: by default the maxAttempts of the handler that runs the task
   * governs it, whichever process enqueued it.
   */
  maxAttempts?: number;
  /**
   * Dedup key: at most one pending-or-running task per (queue, key), enforced by a unique index.
   * Enqueue returns the existing task's id when the key is live.
   */
  key?: string;
  /**
   * With `key`, when a task with that key is live: 'ignore' (default) keeps it; 'replace' updates a
   * pending task's payload, runAt, priority, maxAttempts and tags; 'rerun' does the same for a pending task and, for a
   * running one, runs it exactly once more after the current run, with the newest payload.
   */
  onConflict?: 'ignore' | 'replace' | 'rerun';
  /** Tasks of one group run one at a time, in enqueue order; groups run in parallel. */
  group?: string;
  /**
   * Labels to find the task by (at most 20 distinct strings): `get()` and `list()` return them,
   * and the dashboard's task list shows them and filters by one. Kept when the task is archived.
   */
  tags?: string[];
  /**
   * The task's partition (a tenant, a customer): with the handler option `partitionConcurrency`, at
   * most that many tasks of a partition run at once and claims take partitions in turn.
   */
  partition?: string;
  /**
   * The weight of the task's partition (an integer from 1 to 1000; needs `partition`): a partition
   * of weight 3 gets three turns for every turn of one of weight 1 when claims take partitions in
   * turn (the partitioned claim in claim.sql.ts). Kept per queue and partition: the latest enqueue that gives one sets
   * it, over the module option `partitionWeights`.
   */
  weight?: number;
  /**
   * Fold a burst of requests into one run (see DebounceOptions). Decides the due time itself, so it
   * does not combine with `runAt`, `delayMs` or `key`.
   */
  debounce?: DebounceOptions;
  /**
   * Fan-in: the task waits (state `waiting`) until every task named here is done, then runs; it
   * reads their results with `ctx.parentResults()`. A parent that ends dead or cancelled cancels
   * it. Task ids; in `enqueueMany`, `{ item: i }` for the i-th item of the same call; in
   * `ctx.enqueue`, what an earlier `ctx.enqueue` of the same attempt returned. Does not combine
   * with `key` or `debounce`.
   */
  dependsOn?: DependsOn[];
}

/**
 * A task id, or the position of another item of the same `enqueueMany` call, or a follow-up of the
 * same attempt as `ctx.enqueue` returned it.
 */
export type DependsOn = string | { item: number };

/**
 * What `ctx.enqueue` returns: the follow-up's place among this attempt's follow-ups. It has no id
 * yet (follow-ups are inserted with the completion); later follow-ups name it in `dependsOn`.
 */
export interface FollowUpRef {
  readonly item: number;
}

/**
 * Debounce: requests with the same (queue, key) that come within `delayMs` of each other form a
 * burst, and the burst runs once, with the newest request's payload and options.
 * - 'trailing' (default): the run starts `delayMs` after the last request of the burst, and never
 *   later than `maxDelayMs` after its first request.
 * - 'leading': the first request of a burst runs at once; the requests after it fold into one
 *   trailing run as above (none if there were none).
 * A request that comes once the burst's run has started begins a new burst.
 */
export interface DebounceOptions {
  key: string;
  delayMs: number;
  /** Upper bound on how long a burst's run may be pushed back. Default: none. */
  maxDelayMs?: number;
  mode?: 'trailing' | 'leading';
}

/**
 * A follow-up enqueued from a handler: committed together with the parent's completion. A `key`
 * here always behaves as onConflict 'ignore'.
 */
export type FollowUpOptions = Omit<EnqueueOptions, 'tx' | 'onConflict' | 'debounce'>;

export interface EnqueueItem<P = unknown> {
  queue: string;
  payload: P;
  options?: Omit<EnqueueOptions, 'tx'>;
}

/** An item of `enqueueMany` for queue `Q`: the payload's type follows the queue name (see QueuePayloads). */
export interface EnqueueItemOf<Q extends string> extends EnqueueItem<PayloadOf<Q>> {
  queue: Q;
}

export type { AnyTaskContext, LeaseTaskContext, TaskContext, TaskContextBase, TaskHandlerFn } from './handler-context.types';

/** One stage of a pipeline, as returned by `TaskQueue.chain()`. */
export interface ChainStage {
  stage: number;
  id: string;
  queue: string;
  state: string;
  parentId: string | null;
  attempt: number;
  createdAt: Date;
  startedAt: Date | null;
  finishedAt: Date | null;
  lastError: string | null;
  /** Its dependencies (enqueue option dependsOn), or null. */
  dependsOn: string[] | null;
  /** A workflow's journal (each call's name, outcome, attempt, timings) and what it waits for; absent for a task that is none. */
  workflow?: WorkflowInfo;
}

export interface QueueStats {
  queue: string;
  pending: number;
  /** Waiting for their dependencies (enqueue option dependsOn). */
  waiting: number;
  running: number;
  dead: number;
  done: number;
  cancelled: number;
  /** Age of the oldest task that is due and not started, in ms; null when there is none. */
  oldestDueMs: number | null;
  /** @deprecated The same as oldestDueMs, under its first name. */
  oldestPendingMs: number | null;
  /** The queue is paused as a whole (`TaskQueue.pause`): nothing of it is claimed. */
  paused: boolean;
  /** Its paused partitions (`TaskQueue.pause(queue, { partition })`), in key order. */
  pausedPartitions: string[];
  /** When the queue's cooldown ends (a handler's RateLimitedError with scope 'queue'); null when it is not cooling down. */
  cooldownUntil: Date | null;
  /** Its partitions cooling down on their own ('' for the tasks without one), with when each cooldown ends. */
  cooldownPartitions: { partition: string; until: Date }[];
  /** @deprecated Renamed cooldownUntil; this name goes in the next release. */
  backedOffUntil: Date | null;
  /** @deprecated Renamed cooldownPartitions; this name goes in the next release. */
  backedOffPartitions: { partition: string; until: Date }[];
}

/** Task events, published on `TaskQueue.events$`. */
export interface TaskEvent {
  type: 'claimed' | 'completed' | 'failed' | 'dead' | 'cancelled' | 'released' | 'backed-off' | 'lease-lost' | 'progress';
  queue: string;
  taskId: string;
  attempt: number;
  workerId: string;
  at: Date;
  durationMs?: number;
  error?: string;
  /** 'progress' events: the value `ctx.progress` reported, as written (at most one a second per task). */
  progress?: unknown;
}
