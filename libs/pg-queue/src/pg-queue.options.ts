import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { InvalidOptionsError } from './errors';
import { isOptionsObject, rejectUnknownOptions } from './option-keys';
import { validateSchemaName } from './sql/identifiers';
import { isTextKey, isWeight, WEIGHT_MAX } from './core/task-rules';
import type { ScheduleDefinition } from './schedules/schedule.definition';
import type { FinishedRetention } from './sql/complete.sql';
import type { PrismaClientLike } from './types';
import { assertLimiterKnown, resolveLimiters, type LimiterOptions, type ResolvedLimiters } from './limiter.options';
import { DEFAULT_HANDLER_OPTIONS, queueOptionsPath, resolveHandlerOptions, type HandlerOptions } from './handler.options';

export { DEFAULT_HANDLER_OPTIONS, HANDLER_OPTION_KEYS, hasFlowControl, queueOptionsPath, resolveHandlerOptions, type HandlerOptions, type RateLimit } from './handler.options';

export interface PgQueueModuleOptions {
  /** The app's own PrismaClient (with the @prisma/adapter-pg driver adapter). */
  prisma: PrismaClientLike;
  /**
   * A second PrismaClient (same schema, `@prisma/adapter-pg`) on a read replica, for the operator's
   * reads that count or list: stats(), list(), topErrors(), hourly(), pausedQueues(),
   * listSchedules(), the dashboard's overview, task list and schedules, and the metrics scrape.
   * Reads of one task or schedule by id or name (get, getLogs, chain, getSchedule, waitFor, the
   * dashboard's task page), the health check and every write stay on `prisma`. Default: `prisma`.
   */
  readPrisma?: PrismaClientLike;
  /** Connection string for the LISTEN connection. Without it workers only poll. */
  databaseUrl?: string;
  /** Postgres schema of the queue tables. Default 'pgqueue'. */
  schema?: string;
  /** Written to `locked_by`. Default host:pid:random. */
  workerId?: string;
  /** Start workers at bootstrap. false for API-only processes that only enqueue. Default true. */
  autoStart?: boolean;
  /** Poll period per queue while the LISTEN connection is down (or without databaseUrl). Default 2000 ms. */
  pollIntervalMs?: number;
  /** Poll period per queue while LISTEN works: a safety net only. Default 30 000 ms. */
  listenPollIntervalMs?: number;
  /** How long app.close() waits for running handlers before releasing their tasks. Default 10 s. */
  shutdownTimeoutMs?: number;
  /** Create/upgrade the queue tables at startup. Default true. */
  installSchema?: boolean;
  /** Largest accepted payload, as JSON bytes. Default 256 KiB. */
  maxPayloadBytes?: number;
  /** Stored error text is cut to this many bytes so rows never TOAST. Default 2048. */
  maxErrorBytes?: number;
  /** Finished tasks: moved to task_archive ('archive', default) or deleted. */
  finished?: FinishedRetention;
  /** How often each instance looks for expired leases. Default 10 000 ms. */
  rescueIntervalMs?: number;
  /**
   * With databaseUrl: how long this instance's LISTEN session may be gone from the server, while
   * the instance says nothing, before the other instances take it for dead and take back its
   * running tasks (fenced, as an expired lease) instead of waiting out their leases; also frees
   * the limit slots they held. Postgres ends the session when the process dies (at once for a
   * killed process; for a host or network gone, when the server's TCP keepalive gives up). A live
   * instance whose LISTEN connection drops says, through its Prisma pool, that it is reconnecting,
   * and is not judged while it does; one whose pool cannot say so within this window (an event
   * loop blocked that long, a pool all taken) may lose its claims. After a restart or failover
   * (another server than the one it registered on) and by a judge that lost its own LISTEN
   * connection in the last 6 s, the window is 10 s or this if longer. false: never (its claims
   * wait for their leases). Default 2 000 ms, at least 250.
   */
  deadInstanceAfterMs?: number | false;
  /** Defaults for every handler, over the library's own. */
  handlerDefaults?: Partial<HandlerOptions>;
  /** Per-queue settings, over handlerDefaults and under the decorator's options. */
  queues?: Record<string, Partial<HandlerOptions>>;
  /**
   * How long finished history is kept: archived tasks (`archiveMs`, default 7 days) and dead or
   * cancelled tasks (`deadMs`, default 30 days). One instance at a time prunes every `intervalMs`
   * (default 60 s). The archive is partitioned by finish time, `archivePartitionMs` per partition
   * (default: a quarter of archiveMs, at least 1 minute and at most 1 day), and a partition is
   * dropped whole once its newest possible row is older than archiveMs: archived tasks are kept
   * between archiveMs and archiveMs + archivePartitionMs. Dead or cancelled tasks are deleted in batches.
   */
  retention?: { archiveMs?: number; deadMs?: number; intervalMs?: number; archivePartitionMs?: number };
  /** Periodic tasks declared here rather than on a handler (e.g. for a queue another process runs). */
  schedules?: ScheduleDefinition[];
  /**
   * Weights of partitions by partition key, in every queue whose claims take partitions in turn
   * (integers from 1 to 1000; default 1): a partition of weight 3 gets three turns for every turn
   * of one of weight 1 (the partitioned claim in claim.sql.ts). A weight given at enqueue (`weight`) wins.
   */
  partitionWeights?: Record<string, number>;
  /**
   * Named limiters that several queues share (handler option `limiter`): at most `concurrency`
   * tasks of all their queues running at once and at most `rateLimit.max` started per
   * `rateLimit.perMs`, across every instance, and one back-off (RateLimitedError with the
   * limiter's name as scope). Names are free text except 'task', 'partition' and 'queue'.
   */
  limiters?: Record<string, LimiterOptions>;
}

export type { LimiterOptions } from './limiter.options';

const MODULE_OPTION_KEYS = Object.keys({
  prisma: true,
  databaseUrl: true,
  readPrisma: true,
  schema: true,
  workerId: true,
  autoStart: true,
  pollIntervalMs: true,
  listenPollIntervalMs: true,
  shutdownTimeoutMs: true,
  installSchema: true,
  maxPayloadBytes: true,
  maxErrorBytes: true,
  finished: true,
  rescueIntervalMs: true,
  deadInstanceAfterMs: true,
  handlerDefaults: true,
  queues: true,
  retention: true,
  schedules: true,
  partitionWeights: true,
  limiters: true,
} satisfies Record<keyof PgQueueModuleOptions, true>);
const RETENTION_KEYS = Object.keys({ archiveMs: true, deadMs: true, intervalMs: true, archivePartitionMs: true } satisfies Record<keyof NonNullable<PgQueueModuleOptions['retention']>, true>);
/** Options of forRoot / forRootAsync themselves, which Nest takes out before the queue sees the rest. */
const REGISTRATION_OPTIONS = Object.fromEntries(
  ['isGlobal', 'connection'].map((key) => [key, 'an option of PgQueueModule.forRoot itself: in forRootAsync it goes next to useFactory, not in what the factory returns']),
);

export interface ResolvedModuleOptions extends Required<Omit<PgQueueModuleOptions, 'databaseUrl' | 'handlerDefaults' | 'queues' | 'schedules' | 'retention' | 'limiters'>> {
  limiters: ResolvedLimiters;
  retention: { archiveMs: number; deadMs: number; intervalMs: number; archivePartitionMs: number };
  schedules: ScheduleDefinition[];
  databaseUrl?: string;
  handlerDefaults: HandlerOptions;
  queues: Record<string, Partial<HandlerOptions>>;
}

function positiveInt(option: string, value: unknown, { min = 1, max = Number.MAX_SAFE_INTEGER } = {}): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidOptionsError(option, `expected an integer in [${min}, ${max}], got ${JSON.stringify(value)}`);
  }
  return value;
}

function checkPrismaClient(option: string, client: unknown): void {
  const c = client as Record<string, unknown> | null | undefined;
  if (!c || typeof c.$queryRawUnsafe !== 'function' || typeof c.$transaction !== 'function') {
    throw new InvalidOptionsError(option, 'expected a PrismaClient instance ($queryRawUnsafe and $transaction missing)');
  }
}

export function defaultWorkerId(): string {
  return `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
}

export function resolveModuleOptions(options: PgQueueModuleOptions): ResolvedModuleOptions {
  if (!options || typeof options !== 'object') throw new InvalidOptionsError('options', 'expected an object');
  const fail = (option: string, reason: string): never => {
    throw new InvalidOptionsError(option, reason);
  };
  rejectUnknownOptions(options, MODULE_OPTION_KEYS, fail, REGISTRATION_OPTIONS);
  if (options.retention !== undefined) {
    if (!isOptionsObject(options.retention)) fail('retention', `expected an object, got ${JSON.stringify(options.retention)}`);
    rejectUnknownOptions(options.retention, RETENTION_KEYS, (key, reason) => fail(`retention.${key}`, reason));
  }
  checkPrismaClient('prisma', options.prisma);
  if (options.readPrisma !== undefined) checkPrismaClient('readPrisma', options.readPrisma);
  if (options.databaseUrl !== undefined && (typeof options.databaseUrl !== 'string' || !/^postgres(ql)?:\/\//.test(options.databaseUrl))) {
    throw new InvalidOptionsError('databaseUrl', 'expected a postgres:// or postgresql:// connection string');
  }
  if (options.workerId !== undefined && (typeof options.workerId !== 'string' || options.workerId.length === 0 || options.workerId.length > 200)) {
    throw new InvalidOptionsError('workerId', 'expected a non-empty string of at most 200 characters');
  }
  if (options.finished !== undefined && options.finished !== 'archive' && options.finished !== 'delete') {
    throw new InvalidOptionsError('finished', `expected 'archive' or 'delete', got ${JSON.stringify(options.finished)}`);
  }
  if (options.schedules !== undefined && !Array.isArray(options.schedules)) throw new InvalidOptionsError('schedules', 'expected an array');
  const handlerDefaults = resolveHandlerOptions('handlerDefaults', DEFAULT_HANDLER_OPTIONS, options.handlerDefaults);
  const queues = options.queues ?? {};
  if (!isOptionsObject(queues)) fail('queues', 'expected an object of settings by queue name');
  const limiters = resolveLimiters(options.limiters);
  for (const [queue, q] of Object.entries(queues)) assertLimiterKnown(queueOptionsPath(queue), resolveHandlerOptions(queueOptionsPath(queue), handlerDefaults, q), limiters);
  assertLimiterKnown('handlerDefaults', handlerDefaults, limiters);
  const archiveMs = positiveInt('retention.archiveMs', options.retention?.archiveMs ?? 7 * 86_400_000, { min: 0 });
  return {
    prisma: options.prisma,
    readPrisma: options.readPrisma ?? options.prisma,
    databaseUrl: options.databaseUrl,
    schema: validateSchemaName(options.schema === undefined ? 'pgqueue' : options.schema),
    workerId: options.workerId ?? defaultWorkerId(),
    autoStart: options.autoStart ?? true,
    pollIntervalMs: positiveInt('pollIntervalMs', options.pollIntervalMs ?? 2000, { min: 10 }),
    listenPollIntervalMs: positiveInt('listenPollIntervalMs', options.listenPollIntervalMs ?? 30_000, { min: 10 }),
    shutdownTimeoutMs: positiveInt('shutdownTimeoutMs', options.shutdownTimeoutMs ?? 10_000, { min: 0 }),
    installSchema: options.installSchema ?? true,
    maxPayloadBytes: positiveInt('maxPayloadBytes', options.maxPayloadBytes ?? 256 * 1024, { max: 100 * 1024 * 1024 }),
    maxErrorBytes: positiveInt('maxErrorBytes', options.maxErrorBytes ?? 2048, { min: 64, max: 1024 * 1024 }),
    finished: options.finished ?? 'archive',
    rescueIntervalMs: positiveInt('rescueIntervalMs', options.rescueIntervalMs ?? 10_000, { min: 10 }),
    deadInstanceAfterMs: options.deadInstanceAfterMs === false ? false : positiveInt('deadInstanceAfterMs', options.deadInstanceAfterMs ?? 2000, { min: 250, max: 86_400_000 }),
    handlerDefaults,
    queues,
    schedules: options.schedules ?? [],
    partitionWeights: partitionWeightsOf(options.partitionWeights),
    limiters,
    retention: {
      archiveMs,
      deadMs: positiveInt('retention.deadMs', options.retention?.deadMs ?? 30 * 86_400_000, { min: 0 }),
      intervalMs: positiveInt('retention.intervalMs', options.retention?.intervalMs ?? 60_000, { min: 100 }),
      archivePartitionMs: archivePartitionMs(archiveMs, options.retention?.archivePartitionMs),
    },
  };
}

/** The module option partitionWeights, checked: partition keys as the enqueue option `partition` takes them, weights as `weight`. */
function partitionWeightsOf(given: unknown): Record<string, number> {
  if (given === undefined) return {};
  if (!isOptionsObject(given)) throw new InvalidOptionsError('partitionWeights', `expected an object of weights by partition, got ${JSON.stringify(given)}`);
  for (const [key, weight] of Object.entries(given)) {
    const option = `partitionWeights[${JSON.stringify(key)}]`;
    if (!isTextKey(key)) throw new InvalidOptionsError(option, 'expected a partition key: a non-empty string of at most 512 characters, without NUL or unpaired UTF-16 surrogates');
    if (!isWeight(weight)) throw new InvalidOptionsError(option, `expected an integer from 1 to ${WEIGHT_MAX}, got ${JSON.stringify(weight)}`);
  }
  return { ...given } as Record<string, number>;
}

/**
 * The most archive partitions retention keeps: an id lookup in the archive probes every one, and
 * each is a table to the planner and the catalog. One per day for a year.
 */
const MAX_ARCHIVE_PARTITIONS = 366;

/** The archive's partition width, given or by default, checked against the partitions it makes. */
function archivePartitionMs(archiveMs: number, given: unknown): number {
  const width = positiveInt('retention.archivePartitionMs', given ?? defaultArchivePartitionMs(archiveMs), { min: 60_000, max: 366 * 86_400_000 });
  if (archiveMs / width > MAX_ARCHIVE_PARTITIONS) {
    throw new InvalidOptionsError(
      'retention.archivePartitionMs',
      `${width} ms partitions keep ${Math.ceil(archiveMs / width)} of them for archiveMs ${archiveMs} (at most ${MAX_ARCHIVE_PARTITIONS}: every id lookup probes each); use at least ${Math.ceil(archiveMs / MAX_ARCHIVE_PARTITIONS / 60_000) * 60_000}`,
    );
  }
  return width;
}

/**
 * A quarter of the archive's retention, in whole minutes, between 1 minute and 1 day: four
 * partitions hold the kept history up to 4 days of retention, one per day beyond (an id lookup
 * probes each), and a task outlives archiveMs by at most a quarter of it, or a day. Past a year of
 * retention, wider: never more than MAX_ARCHIVE_PARTITIONS.
 */
function defaultArchivePartitionMs(archiveMs: number): number {
  const quarter = Math.min(86_400_000, Math.max(60_000, Math.floor(archiveMs / 4 / 60_000) * 60_000));
  return Math.max(quarter, Math.ceil(archiveMs / MAX_ARCHIVE_PARTITIONS / 60_000) * 60_000);
}
