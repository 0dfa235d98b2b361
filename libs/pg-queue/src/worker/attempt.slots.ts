import type { Attempt } from './attempt';
import type { ClaimSizer } from './claim.sizer';
import type { LeaseRunner } from './lease.runner';
import type { TransactionalRunner } from './transactional.runner';
import { WorkInFlight } from './work.in-flight';
import { releaseAttempts, type WorkerDeps } from './worker.deps';

/**
 * Runs one queue's claimed attempts in this process within its concurrency. Lease mode: an attempt
 * takes a slot until its handler returns (writing the outcome runs on beside the next one), and
 * claimed attempts wait in a buffer for a free slot. Transactional mode: a batch takes one slot for
 * its transaction. The worker hears when a slot frees (it may claim again) and when work ended.
 */
export class AttemptSlots {
  private busy = 0;
  /** Lease mode: claimed attempts waiting for a free slot. */
  private readonly buffer: Attempt[] = [];
  private readonly work = new WorkInFlight();
  /** Attempts that ran to their end here so far (see QueueWorker.finished). */
  finished = 0;

  constructor(
    private readonly queue: string,
    private readonly concurrency: number,
    private readonly deps: WorkerDeps,
    private readonly runners: { lease: LeaseRunner | null; transactional: TransactionalRunner | null },
    private readonly sizer: ClaimSizer,
    /** The worker is stopping: buffered attempts start no more. */
    private readonly stopping: () => boolean,
    private readonly on: {
      /** A slot freed: the worker may claim. */
      slotFreed: () => void;
      /** Work ended (a lease attempt, or a transactional batch; `ranGroupTask` if it held a group's task). */
      ended: (ranGroupTask: boolean) => void;
    },
  ) {}

  /** Slots taken (lease attempts running their handler, or transactions). */
  get taken(): number {
    return this.busy;
  }

  /** Lease mode: claimed attempts waiting for a slot. */
  get waiting(): number {
    return this.buffer.length;
  }

  /** Work started and not settled. */
  get inFlight(): number {
    return this.work.size;
  }

  settleWithin(ms: number): Promise<boolean> {
    return this.work.settleWithin(ms);
  }

  /** Attempts held here: running, or (lease mode) waiting in the buffer. */
  held(): Attempt[] {
    return [...(this.runners.lease?.held() ?? []), ...(this.runners.transactional?.active() ?? [])];
  }

  /** Runs a claim's attempts; transactional mode, in transactions of at most `perTransaction` each. */
  dispatch(attempts: Attempt[], perTransaction = Infinity): void {
    const { lease, transactional } = this.runners;
    if (lease) {
      for (const a of attempts) lease.hold(a);
      this.buffer.push(...attempts);
      this.pump();
      return;
    }
    for (let i = 0; i < attempts.length; i += perTransaction) {
      const batch = attempts.slice(i, i + perTransaction);
      this.track(batch, () => transactional!.run(batch));
    }
  }

  /** Gives back, uncounted, the attempts that still wait for a slot (shutdown). */
  releaseBuffered(): Promise<void> {
    return this.giveBack(this.takeBuffered());
  }

  /** Lease mode: takes the attempts that wait for a slot out of the buffer; they start no more. */
  takeBuffered(): Attempt[] {
    return this.buffer.splice(0);
  }

  /** Gives back, uncounted, attempts taken out of the buffer (takeBuffered). */
  async giveBack(attempts: Attempt[]): Promise<void> {
    await releaseAttempts(this.deps, attempts, `waiting tasks of "${this.queue}"`);
    for (const a of attempts) this.runners.lease?.unhold(a);
  }

  /** Lease mode: start buffered attempts while slots are free. */
  private pump(): void {
    while (this.runners.lease && this.busy < this.concurrency && this.buffer.length > 0 && !this.stopping()) {
      this.startLease(this.buffer.shift()!);
    }
  }

  /** A lease-mode slot is free again once the handler returns; writing the outcome runs on beside it. */
  private startLease(a: Attempt): void {
    this.busy += 1;
    let slotFreed = false;
    const freeSlot = () => {
      if (slotFreed) return;
      slotFreed = true;
      this.busy -= 1;
      this.sizer.finished();
      this.pump();
      this.on.slotFreed();
    };
    const settle = (failed: boolean, err?: unknown) => {
      freeSlot();
      this.finished += 1;
      this.afterWork(p, a.groupKey !== null);
      if (failed) this.deps.logger.error(`worker for "${this.queue}" failed: ${(err as Error | null)?.message ?? String(err)}`);
    };
    const p: Promise<void> = this.runners.lease!.run(a, freeSlot).then(
      () => settle(false),
      (err: unknown) => settle(true, err),
    );
    this.work.add(p);
  }

  private track(attempts: Attempt[], run: () => Promise<void>): void {
    this.busy += 1;
    const p = run()
      .catch((err: unknown) => this.deps.logger.error(`worker for "${this.queue}" failed: ${(err as Error).message}`))
      .finally(() => {
        this.busy -= 1;
        this.finished += attempts.length;
        this.afterWork(p, attempts.some((a) => a.groupKey !== null));
      });
    this.work.add(p);
  }

  private afterWork(p: Promise<void>, ranGroupTask: boolean): void {
    this.work.delete(p);
    this.pump();
    this.on.ended(ranGroupTask);
  }
}
