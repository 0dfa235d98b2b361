import { Injectable } from '@nestjs/common';
import { TaskHandler, type Task } from '@app/pg-queue';

/** A no-op lease-mode queue the demo uses to time wake-ups on an idle worker. */
@Injectable()
export class DemoProbe {
  readonly startedAt = new Map<number, number>();
  private waiter: { seq: number; resolve: () => void } | null = null;

  @TaskHandler('demo.ping', { mode: 'lease', concurrency: 1 })
  async ping(task: Task<{ seq: number }>): Promise<void> {
    this.startedAt.set(task.payload.seq, performance.now());
    if (this.waiter?.seq === task.payload.seq) this.waiter.resolve();
  }

  /** Resolves when ping `seq` has started. */
  started(seq: number): Promise<void> {
    if (this.startedAt.has(seq)) return Promise.resolve();
    return new Promise((resolve) => (this.waiter = { seq, resolve }));
  }
}
