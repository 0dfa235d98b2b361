import type { Logger } from '@nestjs/common';
import { claimIdOf } from '../sql/claim.sql';
import { LIMITED_CLAIM_BOUNDS } from '../sql/limits.repository';
import { oneLeasePerTask, type BackOff, type Failure, type Lease } from '../sql/statement-values';
import type { TaskRepository } from '../sql/task.repository';
import type { SqlExecutor } from '../types';

/**
 * How long after a claim failed its rows are still looked for: its statement may run on at the
 * server after the connection broke (a stalled network) and commit later, within the limited
 * claim's bound (claim_limited claims only within statementMs of its start; a plain claim never
 * waits on a lock that long).
 */
const LOST_CLAIM_WINDOW_MS = LIMITED_CLAIM_BOUNDS.transactionMs;
/** The most failed claims kept to look for (see lostClaim). */
const MAX_LOST_CLAIMS = 1000;

/**
 * What this instance owes the database: attempts that ended here (given back uncounted, backed
 * off, or failed) while the database could not be reached, so that their release, back-off or
 * failure was never written (a back-off keeps its end and scope: released instead, its task would
 * run again at once against a downstream that asked for a pause);
 * and claims whose answer never came (the connection broke, maybe after the commit), whose rows
 * it holds without knowing them: found by the claims' ids (claimedWith) and given back
 * uncounted.
 * Kept by lease token and written as soon as the database answers again: when the LISTEN
 * connection is back (a failover, a network cut) and on every rescuer pass. Fenced like any
 * release or failure: a lease taken over meanwhile (expired, or its instance judged dead) matches
 * no row and is dropped. Without this, those tasks would wait out their leases. Only attempts whose
 * end is settled here are owed: an attempt still running is never given back by this.
 */
export class OwedOutcomes {
  private readonly releases = new Map<string, Lease>();
  private readonly failures = new Map<string, { failure: Failure; retryBlocksGroup: boolean }>();
  private readonly backOffs = new Map<string, BackOff>();
  /** Failed claims by claim id: their queue, when they failed, and whether their rows were looked for since. */
  private readonly claims = new Map<string, { queue: string; at: number; lookedFor: boolean }>();
  private settling: Promise<number> | null = null;
  private closed = false;

  constructor(private readonly logger: Logger) {}

  release(leases: readonly Lease[]): void {
    for (const l of leases) this.releases.set(l.token, { id: l.id, token: l.token });
  }

  backOff(backOffs: readonly BackOff[]): void {
    for (const b of backOffs) this.backOffs.set(b.token, b);
  }

  fail(failures: readonly Failure[], retryBlocksGroup: boolean): void {
    for (const f of failures) this.failures.set(f.token, { failure: f, retryBlocksGroup });
  }

  /** The claim `claimId` of `queue` failed: whatever it took is given back once the database answers. */
  lostClaim(queue: string, claimId: string): void {
    this.claims.set(claimId, { queue, at: Date.now(), lookedFor: false });
    // A long outage fails a claim a second per queue, most of which never reached the server:
    // the oldest go first (whatever they took still comes back when its lease runs out).
    if (this.claims.size > MAX_LOST_CLAIMS) this.claims.delete(this.claims.keys().next().value!);
  }

  /**
   * Something is owed that was not tried since: worth a settle as soon as a statement succeeds
   * (a claim that failed after a commit is looked for again only on the rescuer's passes and
   * when LISTEN reconnects).
   */
  get due(): boolean {
    return this.size > 0 || [...this.claims.values()].some((c) => !c.lookedFor);
  }

  /** Attempts whose outcome is owed (failed claims not counted: most took nothing). */
  get size(): number {
    return this.releases.size + this.failures.size + this.backOffs.size;
  }

  /** Writes what is owed (one call at a time); resolves with how many were written (fenced ones included). Never throws. */
  settle(db: SqlExecutor, repo: TaskRepository): Promise<number> {
    if ((this.size === 0 && this.claims.size === 0) || this.closed) return Promise.resolve(0);
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
      // Two leases of one task can be owed (the first ran out, the task was claimed here again):
      // a statement fences one lease per task, so they go in statements of their own.
      for (const releases of oneLeasePerTask([...this.releases.values()], (l) => l.id)) {
        await repo.release(db, releases);
        for (const l of releases) this.releases.delete(l.token);
        written += releases.length;
      }
      for (const backOffs of oneLeasePerTask([...this.backOffs.values()], (b) => b.id)) {
        // One whose row a business transaction holds stays owed: dropped, its lease would run out
        // into a counted attempt, and a back-off is never counted. A lease taken over meanwhile
        // matches nothing and is done with.
        const held = new Set<string>();
        await repo.backOff(db, backOffs, held);
        for (const b of backOffs) if (!held.has(b.id)) this.backOffs.delete(b.token);
        written += backOffs.length - held.size;
      }
      for (const blocks of [true, false]) {
        const failures = [...this.failures.values()].filter((f) => f.retryBlocksGroup === blocks).map((f) => f.failure);
        for (const owed of oneLeasePerTask(failures, (f) => f.id)) {
          await repo.fail(db, owed, blocks);
          for (const f of owed) this.failures.delete(f.token);
          written += owed.length;
        }
      }
      if (written > 0) this.logger.warn(`gave back ${written} task(s) whose attempts ended while the database could not be reached`);
      const given = await this.giveBackLostClaims(db, repo);
      if (given > 0) this.logger.warn(`gave back ${given} task(s) claimed by claims whose answer was lost with the connection`);
      written += given;
    } catch (err) {
      this.logger.warn(`could not yet give back ${this.size} task(s) whose attempts ended while the database could not be reached (retried): ${(err as Error).message}`);
    }
    return written;
  }

  private async giveBackLostClaims(db: SqlExecutor, repo: TaskRepository): Promise<number> {
    let given = 0;
    const byQueue = new Map<string, string[]>();
    for (const [claimId, c] of this.claims) byQueue.set(c.queue, [...(byQueue.get(c.queue) ?? []), claimId]);
    for (const [queue, claimIds] of byQueue) {
      const checkedAt = Date.now();
      const held = await repo.claimedWith(db, queue, claimIds);
      if (held.length > 0) given += (await repo.release(db, held)).size;
      // A claim found is settled; one not found may still commit, until its window passed.
      const found = new Set(held.map((l) => claimIdOf(l.token)));
      for (const id of claimIds) {
        const c = this.claims.get(id)!;
        c.lookedFor = true;
        if (found.has(id) || checkedAt - c.at > LOST_CLAIM_WINDOW_MS) this.claims.delete(id);
      }
    }
    return given;
  }
}
