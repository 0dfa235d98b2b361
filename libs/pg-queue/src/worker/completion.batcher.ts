import { oneLeasePerTask, type BackOff, type FailedState, type Failure, type GivenBack, type NewTaskRow, type RanLease } from '../sql/statement-values';
import type { TaskRepository } from '../sql/task.repository';
import type { SqlExecutor } from '../types';

/** What became of a lease given back as a back-off: given back, ended cancelled (its cancel was requested while it ran), or lost. */
export type BackOffOutcome = 'backed-off' | 'cancelled' | 'lost';

/** What a back-off statement made of the lease of task `id` (TaskRepository.backOff). */
export function backOffOutcome(given: GivenBack, id: string): BackOffOutcome {
  const outcome = given.outcomeOf(id);
  return outcome === 'given-back' ? 'backed-off' : outcome;
}

interface Pending<T> {
  resolve: (value: T) => void;
  reject: (err: unknown) => void;
}

/**
 * How a completion ended; `{ failed }`: its follow-ups could not be inserted (see
 * TaskRepository.complete), so it was not completed and its lease is still held.
 */
export type CompletionOutcome = 'done' | 'rerun' | 'cancelled' | 'lost' | { failed: Error };

interface Completion extends Pending<CompletionOutcome> {
  lease: RanLease;
  followUps: NewTaskRow[];
}

/** How long an outcome whose row a business transaction holds waits before it is written again. */
const HELD_RETRY_MS = 500;

/**
 * Lease mode finishes tasks one by one as their handlers return; this collects the outcomes and
 * writes them in one statement each (complete, fail, back off: a burst of 429s ends many attempts
 * at once, and a statement each would take a pool connection each while their commits queue).
 * Group-commit style: while a completion statement is in flight the next outcomes accumulate (up
 * to the batch size), so batches grow with load and an idle queue pays no delay. Every entry is still fenced by its own lease token, so one
 * lost lease never blocks its neighbours, nor does a row that a business transaction holds: the
 * statement gives up on it within its bound, the rest are written, and that outcome is written
 * again every HELD_RETRY_MS until the row is free (or, at shutdown, left to its lease).
 */
export class CompletionBatcher {
  private completions: Completion[] = [];
  private failures: (Pending<FailedState | null> & { failure: Failure })[] = [];
  private backOffs: (Pending<BackOffOutcome> & { backOff: BackOff })[] = [];
  private scheduled = false;
  private readonly inFlight = new Set<Promise<void>>();
  /** Outcomes waiting to be written again (a business transaction held their row). */
  private readonly held = new Set<{ timer: NodeJS.Timeout; again: () => void }>();
  private flushing = false;

  constructor(
    private readonly db: SqlExecutor,
    private readonly repo: TaskRepository,
    private readonly maxBatch: number,
    /** The handler's retryBlocksGroup (see TaskRepository.fail). */
    private readonly retryBlocksGroup: boolean,
  ) {}

  complete(lease: RanLease, followUps: NewTaskRow[]): Promise<CompletionOutcome> {
    return new Promise((resolve, reject) => {
      this.completions.push({ lease, followUps, resolve, reject });
      this.schedule();
    });
  }

  /** Resolves with the task's new state, or null when the lease was lost. */
  fail(failure: Failure): Promise<FailedState | null> {
    return new Promise((resolve, reject) => {
      this.failures.push({ failure, resolve, reject });
      this.schedule();
    });
  }

  /** Resolves with what became of the lease: given back as a back-off, ended cancelled (a cancel was requested), or lost. */
  backOff(backOff: BackOff): Promise<BackOffOutcome> {
    return new Promise((resolve, reject) => {
      this.backOffs.push({ backOff, resolve, reject });
      this.schedule();
    });
  }

  /**
   * Writes whatever is queued and waits for every write in flight. Outcomes whose row is still
   * held get one more try, then are rejected: their leases expire and the tasks run again.
   */
  async flush(): Promise<void> {
    this.giveUpHeld();
    try {
      while (this.queued + this.inFlight.size > 0) {
        this.write();
        await Promise.allSettled([...this.inFlight]);
      }
    } finally {
      this.flushing = false;
    }
  }

  /** From now until the end of the next flush: outcomes still held after one more try are rejected (shutdown's deadline). */
  giveUpHeld(): void {
    this.flushing = true;
    for (const h of [...this.held]) {
      clearTimeout(h.timer);
      this.held.delete(h);
      h.again();
    }
  }

  private get queued(): number {
    return this.completions.length + this.failures.length + this.backOffs.length;
  }

  private schedule(): void {
    if (this.queued >= this.maxBatch) {
      this.write();
      return;
    }
    // A write in flight will pick these up when it returns.
    if (this.scheduled || this.inFlight.size > 0) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.write();
    });
  }

  private write(): void {
    // One lease per task per statement (see complete.sql.ts): a second lease of a task waits for the next write.
    const [completions = [], ...laterCompletions] = oneLeasePerTask(this.completions, (c) => c.lease.id);
    const [failures = [], ...laterFailures] = oneLeasePerTask(this.failures, (f) => f.failure.id);
    const [backOffs = [], ...laterBackOffs] = oneLeasePerTask(this.backOffs, (b) => b.backOff.id);
    this.completions = laterCompletions.flat();
    this.failures = laterFailures.flat();
    this.backOffs = laterBackOffs.flat();
    if (completions.length > 0) {
      this.track(async () => {
        const res = await this.repo.complete(this.db, completions.map((c) => c.lease), completions.flatMap((c) => c.followUps));
        for (const c of completions) {
          const id = c.lease.id;
          const failed = res.failed.get(id);
          if (res.held.has(id)) this.later(c, () => this.completions.push(c));
          else if (failed) c.resolve({ failed });
          else if (res.done.has(id)) c.resolve('done');
          else if (res.rerun.has(id)) c.resolve('rerun');
          else if (res.cancelled.has(id)) c.resolve('cancelled');
          else c.resolve('lost');
        }
      }, completions);
    }
    if (failures.length > 0) {
      this.track(async () => {
        const held = new Set<string>();
        const states = await this.repo.fail(this.db, failures.map((f) => f.failure), this.retryBlocksGroup, held);
        for (const f of failures) {
          if (held.has(f.failure.id)) this.later(f, () => this.failures.push(f));
          else f.resolve(states.get(f.failure.id) ?? null);
        }
      }, failures);
    }
    if (backOffs.length > 0) {
      this.track(async () => {
        const held = new Set<string>();
        const released = await this.repo.backOff(this.db, backOffs.map((b) => b.backOff), held);
        for (const b of backOffs) {
          if (held.has(b.backOff.id)) this.later(b, () => this.backOffs.push(b));
          else b.resolve(backOffOutcome(released, b.backOff.id));
        }
      }, backOffs);
    }
  }

  /** Writes `entry` again after HELD_RETRY_MS (`requeue` puts it back); while flushing, gives it up. */
  private later(entry: Pending<never> | Pending<any>, requeue: () => void): void {
    if (this.flushing) {
      entry.reject(new Error('its row is held by another transaction (a business transaction that enqueued a task depending on it, or asked it to rerun, is still open)'));
      return;
    }
    const h = {
      again: () => {
        requeue();
        this.schedule();
      },
      timer: setTimeout(() => {
        this.held.delete(h);
        h.again();
      }, HELD_RETRY_MS),
    };
    this.held.add(h);
  }

  private track(work: () => Promise<void>, entries: Pending<never>[] | Pending<any>[]): void {
    const p = work().catch((err: unknown) => {
      for (const e of entries) e.reject(err);
    });
    this.inFlight.add(p);
    void p.finally(() => {
      this.inFlight.delete(p);
      if (this.inFlight.size === 0 && this.queued > 0) this.write();
    });
  }
}
