import type { Failure, Lease, NewTaskRow, TaskRepository } from '../sql/task.repository';
import type { SqlExecutor } from '../types';

interface Pending<T> {
  resolve: (value: T) => void;
  reject: (err: unknown) => void;
}

/**
 * Lease mode finishes tasks one by one as their handlers return; this collects the outcomes that
 * arrive in the same tick and writes them in one statement each (complete, fail). Every entry is
 * still fenced by its own lease token, so one lost lease never blocks its neighbours.
 */
export class CompletionBatcher {
  private completions: (Pending<boolean> & { lease: Lease; followUps: NewTaskRow[] })[] = [];
  private failures: (Pending<'pending' | 'dead' | null> & { failure: Failure })[] = [];
  private scheduled = false;
  private readonly inFlight = new Set<Promise<void>>();

  constructor(
    private readonly db: SqlExecutor,
    private readonly repo: TaskRepository,
    private readonly maxBatch: number,
  ) {}

  /** Resolves true once completed, false when the lease was lost (nothing written). */
  complete(lease: Lease, followUps: NewTaskRow[]): Promise<boolean> {
    return new Promise((resolve, reject) => {
      this.completions.push({ lease, followUps, resolve, reject });
      this.schedule();
    });
  }

  /** Resolves with the task's new state, or null when the lease was lost. */
  fail(failure: Failure): Promise<'pending' | 'dead' | null> {
    return new Promise((resolve, reject) => {
      this.failures.push({ failure, resolve, reject });
      this.schedule();
    });
  }

  /** Writes whatever is queued and waits for every write in flight. */
  async flush(): Promise<void> {
    this.write();
    await Promise.allSettled([...this.inFlight]);
  }

  private schedule(): void {
    if (this.completions.length + this.failures.length >= this.maxBatch) {
      this.write();
      return;
    }
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.write();
    });
  }

  private write(): void {
    const completions = this.completions;
    const failures = this.failures;
    this.completions = [];
    this.failures = [];
    if (completions.length > 0) {
      this.track(async () => {
        const done = await this.repo.complete(this.db, completions.map((c) => c.lease), completions.flatMap((c) => c.followUps));
        for (const c of completions) c.resolve(done.has(c.lease.id));
      }, completions);
    }
    if (failures.length > 0) {
      this.track(async () => {
        const states = await this.repo.fail(this.db, failures.map((f) => f.failure));
        for (const f of failures) f.resolve(states.get(f.failure.id) ?? null);
      }, failures);
    }
  }

  private track(work: () => Promise<void>, entries: Pending<never>[] | Pending<any>[]): void {
    const p = work().catch((err: unknown) => {
      for (const e of entries) e.reject(err);
    });
    this.inFlight.add(p);
    void p.finally(() => this.inFlight.delete(p));
  }
}
