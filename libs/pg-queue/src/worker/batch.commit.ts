import { LeaseLostError } from '../errors';
import type { TaskRepository } from '../sql/task.repository';
import type { BackOff, Failure } from '../sql/statement-values';
import type { SqlExecutor } from '../types';
import type { Attempt } from './attempt';
import { backOffOutcome } from './completion.batcher';
import { RollbackAll } from './rollback-all';
import type { Outcome } from './worker.deps';

/** An attempt's outcome in a transactional batch: done, failed, or backed off (RateLimitedError: its writes rolled back). */
export type Result = { ok: true } | { ok: false; failure: Failure; backOff?: undefined } | { ok: false; failure?: undefined; backOff: BackOff };
export const SUCCEEDED: Result = Object.freeze({ ok: true });

/**
 * What a transactional batch writes before its COMMIT: completes the successes (with their
 * follow-ups), records the failures and the back-offs, in the batch's transaction `tx`. Throws
 * RollbackAll when an outcome means none of the batch's writes may commit.
 */
export async function writeBatchOutcomes(repo: TaskRepository, tx: SqlExecutor, results: Map<Attempt, Result>, retryBlocksGroup: boolean): Promise<Map<string, Outcome>> {
  const outcomes = new Map<string, Outcome>();
  const done: Attempt[] = [];
  const failures: Failure[] = [];
  const backOffs: BackOff[] = [];
  for (const [a, r] of results) {
    if (r.ok) done.push(a);
    else if (r.backOff) backOffs.push(r.backOff);
    else failures.push(r.failure);
  }
  if (done.length > 0) {
    const res = await repo.complete(tx, done.map((a) => a.ranLease), done.flatMap((a) => a.followUps));
    // Cancelled while running (the notification did not reach us in time): keep none of its writes.
    const cancelled = done.filter((a) => res.cancelled.has(a.task.id));
    if (cancelled.length > 0) throw new RollbackAll('cancelled', cancelled);
    // Follow-ups that could not go in (TaskRepository.complete): that attempt fails, and its
    // handler's writes must not commit either.
    const notEnqueued = done.filter((a) => res.failed.has(a.task.id));
    if (notEnqueued.length > 0) throw new RollbackAll('follow-ups', notEnqueued, new Map(notEnqueued.map((a) => [a, res.failed.get(a.task.id)!])));
    for (const a of done) {
      const id = a.task.id;
      const outcome = res.done.has(id) ? 'done' : res.rerun.has(id) ? 'rerun' : null;
      // The rows are locked by this transaction (no one else can change a token), so a lease
      // cannot be missing; if one ever is, commit nothing.
      if (outcome === null) throw new LeaseLostError(id);
      outcomes.set(id, outcome);
    }
  }
  if (failures.length > 0) for (const [id, state] of await repo.fail(tx, failures, retryBlocksGroup)) outcomes.set(id, state);
  // Back-offs commit with the batch, in one statement; their handlers' writes were rolled back.
  if (backOffs.length > 0) {
    const released = await repo.backOff(tx, backOffs);
    for (const b of backOffs) outcomes.set(b.id, backOffOutcome(released, b.id));
  }
  return outcomes;
}
