import type { Logger } from '@nestjs/common';
import type { TaskRepository } from '../sql/task.repository';
import type { PrismaClientLike } from '../types';
import type { DatabaseClock } from '../worker/database.clock';
import type { RowLimits } from '../core/task-input';
import { WorkflowRunner } from './workflow.runner';
import { WorkflowWaker, wakeDue } from './workflow.waker';
import { JournalWriter } from './journal.writer';

/** The waker's safety-net look for due parked workflows; wake-ups come on time from timers and notifications. */
const WAKE_POLL_MS = 30_000;

/** What the orchestrator runs for workflows: the runner the lease runners call, and the waker. */
export class WorkflowSupport {
  readonly runner: WorkflowRunner;
  private waker: WorkflowWaker | null = null;

  constructor(
    private readonly prisma: PrismaClientLike,
    private readonly repo: TaskRepository,
    private readonly clock: DatabaseClock,
    rowLimits: RowLimits,
    private readonly logger: Logger,
    /** The queues of this app's @Workflow handlers. */
    private readonly queues: () => string[],
    /** Parked workflows of those queues were woken: their workers look now. */
    private readonly onWoke: () => void = () => undefined,
  ) {
    const journal = new JournalWriter((entries) => repo.workflows.recordMany(prisma, entries));
    const deps = { prisma, repo: repo.workflows, insert: repo.insert.bind(repo), rowLimits, clock, journal };
    this.runner = new WorkflowRunner(deps, logger, (at) => this.waker?.wakeAt(at));
  }

  /** Starts waking this app's parked workflows on time (none: nothing to start). */
  start(): void {
    const queues = this.queues();
    if (queues.length === 0 || this.waker) return;
    this.waker = new WorkflowWaker(this.prisma, this.repo.workflows, queues, this.clock, WAKE_POLL_MS, this.logger, this.onWoke);
    this.waker.start();
  }

  /** Another instance parked a workflow until `epochMs`. */
  wakeAt(epochMs: number): void {
    this.waker?.wakeAt(epochMs);
  }

  /** For drains: wakes the due parked workflows of `queues` now (`all`: every sleeping one, in its journal too). */
  async wakeNow(queues: string[], all: boolean): Promise<number> {
    const mine = queues.filter((q) => this.queues().includes(q));
    if (mine.length === 0) return 0;
    if (all) await this.repo.workflows.wakeAllNow(this.prisma, mine);
    return (await wakeDue(this.prisma, this.repo.workflows, mine)).woke;
  }

  stop(): Promise<void> {
    return this.waker?.stop() ?? Promise.resolve();
  }
}
