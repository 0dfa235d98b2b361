import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import type { ResolvedModuleOptions } from '../pg-queue.options';
import type { Cooldown } from '../sql/backoff.repository';
import type { LimiterBudget } from '../sql/limiter.repository';
import type { TaskQueue } from '../client/task-queue.service';
import { findRegistration, getTaskQueueToken } from '../pg-queue.connections';
import type { ResolvedDashboardOptions } from './dashboard.options';
import { DASHBOARD_OPTIONS } from './dashboard.tokens';
import {
  DashboardRepository,
  type PipelineStage,
  type QueueCounts,
  type ScheduleListRow,
  type TaskDetail,
  type TaskListFilter,
  type TaskListPage,
} from '../sql/dashboard.repository';
import type { PrismaClientLike, SqlExecutor, TaskLogEntry } from '../types';
import type { MinuteCounts } from './views/throughput.chart';
import type { WorkflowInfo } from '../workflow/workflow.types';

/** The overview page's figures. */
export interface Overview {
  /** `handlers` null: a queue with finished tasks only (not counted). */
  queues: (Omit<QueueCounts, 'handlers'> & {
    handlers: number | null;
    done: number;
    cancelled: number;
    failed: number;
    p50Ms: number | null;
    p95Ms: number | null;
    /** Paused as a whole (TaskQueue.pause), and its partitions paused on their own. */
    paused: boolean;
    pausedPartitions: string[];
  })[];
  /** Back-offs in force (handlers' RateLimitedError): queues, partitions and limiters, with their end. */
  cooldowns: Cooldown[];
  /** The named limiters of this registration, with their budget in use. */
  limiters: LimiterBudget[];
  /** 60 minutes, oldest first; the last is the current minute. */
  minutes: MinuteCounts[];
  /** When the archive sample hit its cap: the time it reaches back to, and that minute's index. */
  sampledFrom: Date | null;
  sampledFromIndex: number | null;
}

/**
 * The dashboard's reads, on the queue's own Prisma clients and schema. It finds them in the
 * PgQueueModule of the same app once every module is built (`onModuleInit`); the dashboard adds
 * no connection of its own. The pages that count or list (overview, tasks, schedules) read
 * `readPrisma` (a replica, when the app gives one); the task page reads the primary, so that it
 * shows what an action just did (an action redirects to it).
 */
@Injectable()
export class DashboardData implements OnModuleInit {
  private db!: PrismaClientLike;
  private reads!: PrismaClientLike;
  queue!: TaskQueue;
  private repo!: DashboardRepository;

  constructor(
    private readonly moduleRef: ModuleRef,
    @Inject(DASHBOARD_OPTIONS) private readonly dashboard: ResolvedDashboardOptions,
  ) {}

  onModuleInit(): void {
    // The registration the dashboard was given (one app may have several, see pg-queue.connections.ts).
    const options = findRegistration<ResolvedModuleOptions>(this.moduleRef, this.dashboard.connection, 'options', 'PgQueueDashboardModule');
    // Its operator actions go through that registration's TaskQueue, where their rules live.
    this.queue = this.moduleRef.get<TaskQueue>(getTaskQueueToken(this.dashboard.connection), { strict: false });
    this.db = options.prisma;
    this.reads = options.readPrisma;
    this.repo = new DashboardRepository(options.schema);
  }

  async overview(): Promise<Overview> {
    const [{ queues: counts, recent }, pauses, cooldowns, limiters] = await Promise.all([
      this.reads.$transaction((tx: SqlExecutor) => this.repo.overview(tx), { maxWait: 10_000, timeout: 30_000 }),
      this.queue.pausedQueues(),
      this.queue.cooldowns(),
      this.queue.limiterBudgets(),
    ]);
    const byQueue = new Map<string, Overview['queues'][number]>();
    const none = { due: 0, later: 0, waiting: 0, running: 0, dead: 0, oldestDueMs: null, handlers: null, unhandledMs: null, done: 0, cancelled: 0, failed: 0, p50Ms: null, p95Ms: null, paused: false };
    for (const q of counts) byQueue.set(q.queue, { ...none, pausedPartitions: [], ...q });
    // A paused queue is listed (with its resume button) even when it has no tasks.
    for (const p of pauses) {
      const q = byQueue.get(p.queue) ?? { ...none, pausedPartitions: [], queue: p.queue };
      if (p.partition === null) q.paused = true;
      else q.pausedPartitions.push(p.partition);
      byQueue.set(p.queue, q);
    }
    const minutes: MinuteCounts[] = Array.from({ length: 60 }, () => ({ done: 0, failed: 0 }));
    let sampledFrom: Date | null = null;
    for (const r of recent) {
      sampledFrom = r.sampledFrom ?? sampledFrom;
      if (r.queue !== null) {
        const q = byQueue.get(r.queue) ?? { ...none, pausedPartitions: [], queue: r.queue };
        byQueue.set(r.queue, { ...q, done: r.done, cancelled: r.cancelled, failed: r.failed, p50Ms: r.p50Ms, p95Ms: r.p95Ms });
      } else if (r.minutesAgo !== null) {
        minutes[59 - r.minutesAgo] = { done: r.done, failed: r.failed };
      }
    }
    const sampledFromIndex = sampledFrom ? Math.max(0, 59 - Math.floor((Date.now() - sampledFrom.getTime()) / 60_000)) : null;
    const queues = [...byQueue.values()].sort((a, b) => (a.queue < b.queue ? -1 : a.queue > b.queue ? 1 : 0));
    return { queues, minutes, sampledFrom, sampledFromIndex, cooldowns, limiters };
  }

  tasks(filter: TaskListFilter): Promise<TaskListPage> {
    return this.repo.tasks(this.reads, filter);
  }

  task(id: string): Promise<TaskDetail | null> {
    return this.repo.task(this.db, id);
  }

  /** A task's log (TaskQueue.getLogs: its rules in one place). */
  logs(id: string): Promise<TaskLogEntry[] | null> {
    return this.queue.getLogs(id);
  }

  /** A workflow's journal and wait (undefined for other tasks). */
  async workflow(id: string): Promise<WorkflowInfo | undefined> {
    return (await this.queue.get(id))?.workflow;
  }

  async pipeline(id: string): Promise<PipelineStage[]> {
    return this.repo.chain(this.db, id);
  }

  async schedules(): Promise<ScheduleListRow[]> {
    return this.repo.schedules(this.reads);
  }
}
