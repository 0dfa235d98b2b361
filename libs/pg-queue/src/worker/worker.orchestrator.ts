import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { TaskHandlerExplorer } from '../discovery/task-handler.explorer';
import { TaskHandlerRegistry, type RegisteredHandler } from '../discovery/task-handler.registry';
import { PgQueueError } from '../errors';
import { hasFlowControl } from '../handler.options';
import { TaskEvents } from '../observability/task-events';
import type { ResolvedModuleOptions } from '../pg-queue.options';
import { RESOLVED_OPTIONS } from '../pg-queue.tokens';
import { ScheduleTicker } from '../schedules/schedule.ticker';
import { DrainRepository } from '../sql/drain.repository';
import { HandlerRepository } from '../sql/handlers.repository';
import { within } from '../core/within';
import { OperatorRepository } from '../sql/operator.repository';
import { PauseRepository } from '../sql/pause.repository';
import { installSchema, schemaUpgradeState, type UnfinishedUpgrade } from '../sql/schema.installer';
import { ScheduleRepository } from '../sql/schedule.repository';
import { TaskRepository } from '../sql/task.repository';
import { startupConnectionError } from './startup.errors';
import { DatabaseClock } from './database.clock';
import { HandlerPresence } from './handler.presence';
import { PauseWatcher } from './pause.watcher';
import { LeaseRescuer, type GoneInstances } from './lease.rescuer';
import { InstanceLiveness, listenerName } from './instance.liveness';
import { LimiterRepository } from '../sql/limiter.repository';
import { LivenessRepository } from '../sql/liveness.repository';
import { DependencySettler } from './dependency.settler';
import { RetentionPruner, type PruneResult } from './retention.pruner';
import { QueueDrainer, type DrainOptions, type DrainReport } from './queue.drainer';
import { WakeupListener } from './wakeup.listener';
import { routeNotices } from './notice.routes';
import { WorkerSet } from './worker.set';
import { workerDeps, type WorkerDeps } from './worker.deps';
import { readQueueHealth, type QueueHealth } from './queue.health';
import { WorkflowSupport } from '../workflow/workflow.support';
import { prismaPoolMax } from '../prisma-adapter';
import { connectionBudget } from './connection.budget';

export type { QueueHealth } from './queue.health';

/** How long past shutdownTimeoutMs shutdown still waits for aborted work to roll back or be released. */
const SHUTDOWN_GRACE_MS = 2000;

/**
 * Starts and stops the queue machinery with the Nest application:
 * - onModuleInit: find the handlers and check every declaration (handler options, schedules)
 *   before anything touches the database, so a configuration mistake fails startup with nothing
 *   opened and the process can end at once; then install/upgrade the schema (so enqueue works from
 *   any later hook), or without installSchema check that the database can be reached: an
 *   unreachable one fails startup here, with one line naming host and port;
 * - onApplicationBootstrap: unless autoStart is false, the LISTEN connection, the schedule ticker,
 *   one QueueWorker per registered handler, the lease rescuer, the pruner, and the record of the
 *   queues this instance handles (HandlerPresence; a start that fails part-way stops what it started);
 * - onModuleDestroy: drain. Nest may destroy the app's PrismaService before this module, so the
 *   client's `$disconnect` is wrapped to wait for the drain first: work never loses its pool.
 */
@Injectable()
export class WorkerOrchestrator implements OnModuleInit, OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger = new Logger('PgQueue');
  private readonly workers: WorkerSet;
  private listener: WakeupListener | null = null;
  private rescuer: LeaseRescuer | null = null;
  private ticker: ScheduleTicker | null = null;
  private pruner: RetentionPruner | null = null;
  private presence: HandlerPresence | null = null;
  private pauses: PauseWatcher | null = null;
  /** This instance's record that its LISTEN session is up (null: none, without databaseUrl or with deadInstanceAfterMs false). */
  private readonly liveness: InstanceLiveness | null;
  private readonly gone: GoneInstances;
  private readonly settler: DependencySettler;
  private readonly drainer: QueueDrainer;
  private started = false;
  private shutdownPromise: Promise<void> | null = null;
  private readonly deps: WorkerDeps;
  private readonly workflows: WorkflowSupport;

  constructor(
    @Inject(RESOLVED_OPTIONS) private readonly options: ResolvedModuleOptions,
    private readonly repo: TaskRepository,
    private readonly registry: TaskHandlerRegistry,
    private readonly explorer: TaskHandlerExplorer,
    private readonly scheduleRepo: ScheduleRepository,
    private readonly operator: OperatorRepository,
    events: TaskEvents,
  ) {
    this.settler = new DependencySettler(options.prisma, repo.dependencies, this.logger);
    this.drainer = new QueueDrainer(options.prisma, new DrainRepository(options.schema), this.settler, (q) => this.workers.get(q), () =>
      this.registry.all().map((h) => h.queue),
      (queues, all) => this.workflows.wakeNow(queues, all),
    );
    const clock = new DatabaseClock();
    const rowLimits = { maxPayloadBytes: options.maxPayloadBytes };
    const workflowQueues = () => this.registry.all().flatMap((h) => (h.workflow ? [h.queue] : []));
    const wakeWorkflowQueues = () => workflowQueues().forEach((q) => this.workers.find(q)?.wake());
    this.workflows = new WorkflowSupport(options.prisma, repo, clock, rowLimits, this.logger, workflowQueues, wakeWorkflowQueues);
    this.deps = workerDeps(options, { repo, events, logger: this.logger, clock, rowLimits, workflows: this.workflows.runner });
    this.workers = new WorkerSet(registry, this.deps, () => this.pollIntervalMs());
    const livenessRepo = new LivenessRepository(options.schema);
    this.liveness =
      options.databaseUrl && options.deadInstanceAfterMs !== false
        ? new InstanceLiveness(options.prisma, livenessRepo, options.workerId, listenerName(options.schema, options.workerId), options.deadInstanceAfterMs, this.logger)
        : null;
    this.gone = { repo: livenessRepo, self: options.workerId, own: this.liveness, listening: () => this.listening, owed: this.deps.owed };
    // waitFor and the cross-process stream (client/task-waiter.ts) share this process's one LISTEN
    // connection, started on their first use when the workers are not (autoStart false).
    events.notices.attach({
      available: Boolean(options.databaseUrl),
      listen: () => (this.shutdownPromise ? Promise.resolve() : this.ensureListener()),
      connected: () => this.listening,
    });
  }

  async onModuleInit(): Promise<void> {
    this.explorer.explore();
    this.registry.schedules();
    holdDisconnect(this.options.prisma, async () => {
      if (this.started) await this.shutdown();
    });
    // Also the startup check that the database can be reached: without it a process whose database
    // is down would start its workers, listener and timers, fail later in bootstrap with a
    // multi-line driver error, and keep running (and logging) after Nest gave up on it.
    try {
      if (this.options.installSchema) await installSchema(this.options.prisma, this.options.schema);
      else if (this.registry.all().some((h) => hasFlowControl(h.options))) await this.deps.limits.assertInstalled(this.options.prisma);
      else await this.options.prisma.$queryRawUnsafe('SELECT 1');
    } catch (err) {
      throw startupConnectionError(err, this.options.prisma) ?? err;
    }
  }

  async onApplicationBootstrap(): Promise<void> {
    if (this.options.autoStart) await this.start();
  }

  async onModuleDestroy(): Promise<void> {
    await this.shutdown();
  }

  /** Starts workers for every registered handler (called at bootstrap unless autoStart is false). */
  async start(): Promise<void> {
    if (this.started) return;
    if (this.shutdownPromise) throw new PgQueueError('pg-queue: cannot start after shutdown');
    this.started = true;
    try {
      // What can fail first (the connection budget; the LISTEN connection retries by itself; the
      // ticker syncs its rows).
      await checkConnectionBudget(this.operator, this.options, this.registry.all(), this.logger);
      await this.ensureListener();
      const ticker = await this.syncedTicker();
      // Which queues use which named limiter, before any claim counts a limiter's running tasks.
      await new LimiterRepository(this.options.schema, this.options.limiters).register(this.options.prisma, this.registry.all().map((h) => ({ queue: h.queue, limiter: h.options.limiter })));
      // Which queues are paused, before any worker claims (see PauseWatcher).
      for (const handler of this.registry.all()) this.workers.get(handler.queue);
      this.pauses = new PauseWatcher(this.options.prisma, new PauseRepository(this.options.schema), () => this.workers.all(), () => this.pollIntervalMs(), this.logger);
      await this.pauses.start();
      for (const handler of this.registry.all()) this.workers.get(handler.queue).start();
      this.rescuer = new LeaseRescuer(this.options.prisma, this.repo, this.options.rescueIntervalMs, this.logger, this.settler, this.gone);
      this.rescuer.start();
      this.pruner = new RetentionPruner(this.options.prisma, this.repo, this.options.retention, this.logger);
      this.pruner.start();
      this.workflows.start();
      ticker.start();
      const queues = this.registry.all().map((h) => h.queue);
      this.presence = new HandlerPresence(this.options.prisma, new HandlerRepository(this.options.schema), this.options.workerId, queues, this.options.rescueIntervalMs, this.logger);
      this.presence.start();
    } catch (err) {
      await this.shutdown(); // Nest calls no destroy hook after a failed bootstrap: nothing may stay open
      throw startupConnectionError(err, this.options.prisma) ?? err;
    }
  }

  /**
   * Stops claiming, drains within shutdownTimeoutMs, releases the rest. Idempotent. Never takes
   * longer than shutdownTimeoutMs plus SHUTDOWN_GRACE_MS: what still waits for a database that
   * does not answer then (a stalled network) is left behind, and its leases expire.
   */
  shutdown(): Promise<void> {
    this.shutdownPromise ??= (async () => {
      const deadline = Date.now() + this.options.shutdownTimeoutMs;
      // Each part starts nothing once stopped and resolves when what it had under way ended: once
      // shutdown resolves, nothing of the queue's touches the Prisma client.
      const stopping = (async () => {
        const maintenance = Promise.all([this.rescuer?.stop(), this.pruner?.stop(), this.presence?.stop(), this.workflows.stop(), this.pauses?.stop()]);
        await this.ticker?.stop();
        await this.workers.stop(deadline);
        await this.listener?.stop();
        await maintenance;
        // After the workers released what they could and the listener closed: what is left waits for its lease.
        if (this.listener) await this.liveness?.retire();
        await this.deps.owed?.close();
        await this.settler.close();
      })();
      if ((await within(stopping.then(() => true), deadline + SHUTDOWN_GRACE_MS - Date.now(), false)) === false) {
        this.logger.warn(`shutdown: work still waiting for the database ${SHUTDOWN_GRACE_MS} ms past shutdownTimeoutMs; stopped without it (its leases expire)`);
      }
    })();
    return this.shutdownPromise;
  }

  /**
   * Runs due tasks of one queue (or every registered queue) inline until the queues are quiet,
   * follow-ups and dependants included, also waiting for what this app's own worker loops run in
   * them (see QueueDrainer); returns how many attempts ran.
   */
  async drain(queue?: string): Promise<number> {
    return (await this.drainWith({ queue })).ran;
  }

  /** drain() with the options of `drainQueue(app, options)`, and its report. */
  async drainWith(options: DrainOptions = {}): Promise<DrainReport> {
    await this.ensureListener(); // cancel requests reach drained handlers too
    return this.drainer.drain(options);
  }

  /** Returns expired leases to the queue now (the rescuer also does it every rescueIntervalMs). */
  rescueExpired(): Promise<{ rescued: number; dead: number }> {
    const rescuer = this.rescuer ?? new LeaseRescuer(this.options.prisma, this.repo, this.options.rescueIntervalMs, this.logger);
    return rescuer.rescueOnce().then(({ rescued, dead }) => ({ rescued, dead }));
  }

  /** Deletes expired history now (the pruner also does it every retention.intervalMs). */
  pruneHistory(): Promise<PruneResult> {
    return new RetentionPruner(this.options.prisma, this.repo, this.options.retention, this.logger).pruneAll();
  }

  /** Tests: every parked workflow of the queues (default: this app's) with a time bound wakes now. */
  async wakeWorkflows(queue?: string): Promise<number> {
    return this.workflows.wakeNow(queue === undefined ? this.registry.all().map((h) => h.queue) : [queue], true);
  }

  /** Enqueues the due ticks of every schedule now (the ticker also does it on time). */
  async tickSchedules(): Promise<number> {
    return (await this.syncedTicker()).tickOnce();
  }

  /** The ticker, created on first use after declaring this process's schedules in the database. */
  private async syncedTicker(): Promise<ScheduleTicker> {
    if (!this.ticker) {
      const ticker = new ScheduleTicker(this.options.prisma, this.scheduleRepo, this.repo, this.logger, () => this.pollIntervalMs());
      await ticker.sync(this.registry.schedules(), this.registry.all().map((h) => h.queue));
      this.ticker = ticker;
    }
    return this.ticker;
  }

  /**
   * What a health check needs in one call (see PgQueueHealthIndicator): whether the database
   * answers the metrics scrape (index probes only, flat however large the history), LISTEN's state,
   * this process's worker loops (none unless started), and per queue the due count and the oldest
   * due task's age.
   */
  async health(databaseTimeoutMs = 5000): Promise<QueueHealth> {
    const workers = this.started ? this.workers.statuses() : [];
    const listen = !this.options.databaseUrl
      ? 'poll-only'
      : !this.listener || this.shutdownPromise
        ? 'off'
        : this.listening
          ? 'connected'
          : 'disconnected';
    return readQueueHealth(this.operator, this.options.prisma, databaseTimeoutMs, { listen, workers });
  }

  /**
   * Migrations left unfinished in the database (another instance upgrading now, or an upgrade
   * stopped part-way), for the health check; null when schema_version cannot be read.
   */
  async schemaUpgrades(): Promise<UnfinishedUpgrade[] | null> {
    return schemaUpgradeState(this.options.prisma, this.options.schema).catch(() => null);
  }

  /** A running task was cancelled somewhere: abort its handler if it runs in this process. */
  cancelRunning(taskId: string): boolean {
    return this.workers.cancel(taskId);
  }

  get listening(): boolean {
    return this.listener?.isConnected ?? false;
  }

  private async ensureListener(): Promise<void> {
    if (this.listener || !this.options.databaseUrl) return;
    const routes = routeNotices({
      workers: this.workers,
      clock: this.deps.clock,
      settler: this.settler,
      workflows: this.workflows,
      events: this.deps.events,
      liveness: this.liveness,
      settleOwed: () => void this.deps.owed?.settle(this.options.prisma, this.repo),
      pauses: () => this.pauses,
      ticker: () => this.ticker,
    });
    this.listener = new WakeupListener(this.options.databaseUrl, this.repo.channel, this.logger, routes, this.liveness?.listener);
    await this.listener.start();
  }

  /** With LISTEN healthy, NOTIFY and due-time timers start tasks; polling is only a safety net. */
  private pollIntervalMs(): number {
    return this.listening ? this.options.listenPollIntervalMs : this.options.pollIntervalMs;
  }
}

/**
 * Wraps the app's PrismaClient `$disconnect` so that `before()` runs first: Nest may destroy the
 * app's PrismaService before the queue's module, and the queue's work must not lose its pool.
 */
export function holdDisconnect(prisma: unknown, before: () => Promise<void>): void {
  const client = prisma as { $disconnect?: () => Promise<void> };
  const disconnect = client.$disconnect;
  if (typeof disconnect !== 'function') return;
  Object.defineProperty(client, '$disconnect', {
    configurable: true,
    writable: true,
    value: async () => {
      await before();
      return disconnect.call(client);
    },
  });
}

/**
 * Refuses a configuration whose connections the server cannot accept, and warns when the queue's
 * work will wait for the Prisma pool (see connection.budget.ts). Run when workers start.
 */
export async function checkConnectionBudget(operator: OperatorRepository, options: ResolvedModuleOptions, handlers: RegisteredHandler[], logger: Logger): Promise<void> {
  const server = await operator.connectionLimits(options.prisma);
  const budget = connectionBudget(handlers, Boolean(options.databaseUrl), { poolMax: prismaPoolMax(options.prisma), ...server });
  if (budget.refusal) throw new PgQueueError(`pg-queue: connection budget: ${budget.refusal}`);
  if (budget.warning) logger.warn(`connection budget: ${budget.warning}`);
}
