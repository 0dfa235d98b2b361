import type { Logger } from '@nestjs/common';
import type { Failure, Lease } from '../sql/statement-values';
import type { TaskRepository } from '../sql/task.repository';
import type { SqlExecutor } from '../types';

/**
 * What this instance owes the database: attempts that ended here (given back uncounted, or failed)
 * while the database could not be reached, so that their release or failure was never written.
 * Kept by lease token and written as soon as the database answers again: when the LISTEN
 * connection is back (a failover, a network cut) and on every rescuer pass. Fenced like any
 * release or failure: a lease taken over meanwhile (expired, or its instance judged dead) matches
 * no row and is dropped. Without this, those tasks waited out their leases. Only attempts whose
 * end is settled here are owed: an attempt still running is never given back by this.
 */
export class OwedOutcomes {
  private readonly releases = new Map<string, Lease>();
  private readonly failures = new Map<string, { failure: Failure; retryBlocksGroup: boolean }>();
  private settling: Promise<number> | null = null;
  private closed = false;

  constructor(private readonly logger: Logger) {}

  release(leases: readonly Lease[]): void {
    for (const l of leases) this.releases.set(l.token, { id: l.id, token: l.token });
  }

  fail(failures: readonly Failure[], retryBlocksGroup: boolean): void {
    for (const f of failures) this.failures.set(f.token, { failure: f, retryBlocksGroup });
  }

  get size(): number {
    return this.releases.size + this.failures.size;
  }

  /** Writes what is owed (one call at a time); resolves with how many were written (fenced ones included). Never throws. */
  settle(db: SqlExecutor, repo: TaskRepository): Promise<number> {
    if (this.size === 0 || this.closed) return Promise.resolve(0);
    this.settling ??= this.write(db, repo).finally(() => (this.settling = null));
    return this.settling;
  }

  /** At shutdown: writes nothing more; resolves once the write under way (if any) ended. What is still owed waits for its leases. */
  async close(): Promise<void> {
    this.closed = true;
    await this.settling;
  }

  private async write(db: SqlExecutor, repo: TaskRepository): Promise<number> {
    let written = 0;
    try {
      const releases = [...this.releases.values()];
      if (releases.length > 0) {
        await repo.release(db, releases);
        for (const l of releases) this.releases.delete(l.token);
        written += releases.length;
      }
      for (const blocks of [true, false]) {
        const owed = [...this.failures.values()].filter((f) => f.retryBlocksGroup === blocks).map((f) => f.failure);
        if (owed.length === 0) continue;
        await repo.fail(db, owed, blocks);
        for (const f of owed) this.failures.delete(f.token);
        written += owed.length;
      }
      if (written > 0) this.logger.warn(`gave back ${written} task(s) whose attempts ended while the database could not be reached`);
    } catch (err) {
      this.logger.warn(`could not yet give back ${this.size} task(s) whose attempts ended while the database could not be reached (retried): ${(err as Error).message}`);
    }
    return written;
  }
}
