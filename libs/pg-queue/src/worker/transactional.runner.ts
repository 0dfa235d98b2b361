import { keepResult } from './task-result';
import { LeaseLostError, ShutdownAbortError, TaskCancelledError, TaskTimeoutError } from '../errors';
import type { RegisteredHandler } from '../discovery/task-handler.registry';
import type { BackOff, BatchBackend, GivenBack, Failure } from '../sql/statement-values';
import { backOffOf, holdsWholeQueue } from './cooldown.request';
import type { SqlExecutor } from '../types';
import type { Attempt } from './attempt';
import { AttemptContext, type ContextScope } from './attempt.context';
import { invokeTraced } from './handler.invoker';
import { TransactionGate } from './transaction.gate';
import { isConnectionLost } from '../sql/database-error';
import { failureOf, publish, publishGivenBack, publishOutcome, releaseAttempts, reportSink, type Outcome, type WorkerDeps } from './worker.deps';
import { backOffOutcome } from './completion.batcher';
import type { TaskRepository } from '../sql/task.repository';

/**
 * Transactional mode: a claimed batch runs inside one Prisma interactive transaction.
 *
 *   BEGIN
 *   lock leases (FOR KEY SHARE, fenced by token)   -- lost leases are skipped
 *   for each task: [SAVEPOINT] handler [RELEASE | ROLLBACK TO]
 *   complete successes + insert their follow-ups    -- one statement
 *   record failures (retry / dead)                  -- one statement
 *   COMMIT
 *
 * Each task is isolated by its savepoint: one failure never undoes a neighbour's success. A crash
 * anywhere before COMMIT leaves no trace of the handlers' writes; the attempts stay counted by the
 * claim, and the leases expire into a retry. A handler that times out and does not stop, or a
 * shutdown past its deadline, rolls the whole transaction back: neighbours are then re-run in a new
 * transaction (their first run left nothing behind), or on shutdown released uncounted.
 */
export class TransactionalRunner {
  private readonly running = new Set<Attempt>();
  private readonly scope: ContextScope;
  private readonly outside: OutsideOutcomes;

  constructor(
    private readonly deps: WorkerDeps,
    private readonly handler: RegisteredHandler,
    private readonly isStopping: () => boolean,
    /** Asks the worker to look for due tasks again in `ms` (a retry's backoff). */
    private readonly wakeIn: (ms: number) => void,
    /** Reports what a transaction ran, how long it took, and how many had to wait (sizes the next batches). */
    private readonly measured: (tasks: number, ms: number, leftOver: number) => void,
  ) {
    this.outside = new OutsideOutcomes(deps, handler, wakeIn);
    this.scope = {
      mode: 'transactional',
      workerId: deps.workerId,
      rowLimits: deps.rowLimits,
      // The lease is fenced by the transaction's row locks: nothing to extend.
      heartbeat: async (a) => {
        if (a.aborted) throw new LeaseLostError(a.task.id);
      },
      parentResults: (id, tx) => deps.repo.dependencies.parentResults(tx ?? deps.prisma, id),
      assertTasksExist: (ids, tx) => deps.repo.dependencies.assertExist(tx ?? deps.prisma, ids),
      reports: reportSink(deps),
    };
  }

  async run(batch: Attempt[]): Promise<void> {
    for (const a of batch) this.running.add(a);
    try {
      let todo = batch;
      while (todo.length > 0) {
        if (this.isStopping()) {
          await this.release(todo);
          return;
        }
        todo = await this.runTransaction(todo);
      }
    } finally {
      for (const a of batch) this.running.delete(a);
    }
  }

  /** Attempts in a batch this runner holds (for shutdown aborts). */
  active(): Attempt[] {
    return [...this.running];
  }

  /** Runs one transaction; returns the attempts that still need one. */
  private async runTransaction(attempts: Attempt[]): Promise<Attempt[]> {
    const results = new Map<Attempt, Result>();
    const later: Attempt[] = [];
    const aside: Attempt[] = [];
    let queueBackedOff = false;
    let givenBack: GivenBack | null = null;
    /** null until the leases are locked: a failure before that reached no handler. */
    let held: Set<string> | null = null;
    let current: Attempt | null = null;
    const { timeoutMs } = this.handler.options;
    let outcomes = new Map<string, Outcome>();
    const usage = { savepoints: 0 };
    try {
      await this.deps.prisma.$transaction(
        async (tx: SqlExecutor) => {
          const lock = await this.deps.repo.lockLeases(tx, attempts.map((a) => a.lease), {
            idleMs: timeoutMs + IDLE_GRACE_MS,
            statementMs: timeoutMs + STATEMENT_GRACE_MS,
          });
          held = lock.held;
          const began = performance.now();
          for (const a of attempts) {
            if (!lock.held.has(a.task.id)) {
              publish(this.deps, a, 'lease-lost');
              continue;
            }
            // After a back-off of the whole queue, the rest would meet it too: given back with it.
            if (queueBackedOff) {
              aside.push(a);
              continue;
            }
            if (batchTransactionFull({ ran: results.size, elapsedMs: performance.now() - began, savepoints: usage.savepoints, stopping: this.isStopping() })) {
              later.push(a);
              continue;
            }
            current = a;
            const result = await this.runOne(tx, a, usage, lock.backend);
            results.set(a, result);
            queueBackedOff = !result.ok && result.backOff !== undefined && holdsWholeQueue(result.backOff, this.handler);
            current = null;
          }
          this.measured(results.size, performance.now() - began, later.length);
          outcomes = await writeBatchOutcomes(this.deps.repo, tx, results, this.handler.options.retryBlocksGroup);
          if (aside.length > 0) givenBack = await this.deps.repo.release(tx, aside.map((a) => a.lease));
        },
        { maxWait: TX_START_WAIT_MS, timeout: timeoutMs + TX_BUDGET_MS + 10_000 },
      );
    } catch (err) {
      const stillHeld = held === null ? attempts : attempts.filter((a) => held!.has(a.task.id));
      return this.recover(err, stillHeld, results, current);
    }
    this.announce(results, outcomes);
    if (givenBack) publishGivenBack(this.deps, aside, givenBack);
    return later;
  }

  private async runOne(tx: SqlExecutor, a: Attempt, usage: { savepoints: number }, backend: BatchBackend): Promise<Result> {
    const gate = new TransactionGate(tx);
    const ctx = new AttemptContext(a, this.scope, gate);
    a.beginRun();
    publish(this.deps, a, 'claimed');
    const result = await invokeTraced(a, 'transactional', this.handler.options.timeoutMs, () => this.handler.handle(a.task, ctx));
    a.endRun();
    gate.close(() => new LeaseLostError(a.task.id));
    // Outside this transaction (its FOR KEY SHARE lock lets the write in), before the outcome is recorded.
    await a.reporter?.finish();
    if (gate.tookSavepoint) usage.savepoints++;
    // Follow-ups with dependencies take a savepoint of their own at the completion (TaskRepository.complete).
    if (a.followUps.some((f) => f.dependsOn !== null)) usage.savepoints++;
    const unstorable = result.kind === 'ok' ? keepResult(a, result.value, this.deps.rowLimits) : null;
    if (unstorable) {
      await gate.rollback();
      return this.failed(a, unstorable);
    }
    if (result.kind === 'ok') {
      try {
        if (gate.tookSavepoint) await gate.release();
        return SUCCEEDED;
      } catch (err) {
        // The handler swallowed a failed statement: the savepoint's work is unusable.
        await gate.rollback();
        return this.failed(a, err);
      }
    }
    // The server's state, not the task's (see isConnectionLost): the whole transaction is lost.
    if (result.kind === 'error' && isConnectionLost(result.error)) throw result.error;
    if (result.kind === 'error') {
      await gate.rollback();
      const backOff = backOffOf(result.error, a, this.handler, this.deps);
      if (backOff !== null && !(backOff instanceof Error)) {
        a.followUps.length = 0;
        return { ok: false, backOff };
      }
      return this.failed(a, backOff ?? result.error);
    }
    if (result.reason instanceof ShutdownAbortError) {
      await this.cancelStatement(backend);
      throw new RollbackAll('shutdown', [a]);
    }
    const stopped = await Promise.race([result.settled.then(() => true), delay(SETTLE_GRACE_MS).then(() => false)]);
    if (!stopped) {
      // Most likely stuck in a query: end it, or the rollback would wait behind it.
      await this.cancelStatement(backend);
      throw new RollbackAll('stuck-handler', [a]);
    }
    await gate.rollback();
    return this.failed(a, result.reason ?? new TaskTimeoutError(a.task.id, this.handler.options.timeoutMs));
  }

  private failed(a: Attempt, error: unknown): Result {
    a.followUps.length = 0;
    return { ok: false, failure: failureOf(a, error, this.handler, this.deps.maxErrorBytes) };
  }

  private announce(results: Map<Attempt, Result>, outcomes: Map<string, Outcome>): void {
    for (const [a, r] of results) {
      const outcome = outcomes.get(a.task.id) ?? 'lost';
      publishOutcome(this.deps, a, outcome, r.ok ? undefined : r.failure?.error);
      if (outcome === 'pending' && !r.ok && r.failure) this.wakeIn(r.failure.delayMs);
      if (outcome === 'backed-off' && !r.ok && r.backOff) this.wakeIn(this.deps.clock.msUntil(r.backOff.untilMs));
    }
  }

  /** Nothing of the transaction committed. Decide what each held attempt needs now. */
  private async recover(err: unknown, attempts: Attempt[], results: Map<Attempt, Result>, current: Attempt | null): Promise<Attempt[]> {
    if (err instanceof RollbackAll && err.why === 'shutdown') {
      await this.release(attempts);
      return [];
    }
    if (err instanceof RollbackAll) {
      // Record the culprits' outcome on its own (a cancel request turns it into cancelled); the
      // others' work was rolled back with them, so they run again.
      const reasonOf = (a: Attempt) =>
        err.reasons.get(a) ??
        (err.why === 'cancelled' ? new TaskCancelledError(a.task.id) : a.abortReason ?? new TaskTimeoutError(a.task.id, this.handler.options.timeoutMs));
      const failures = err.culprits.map((a) => failureOf(a, reasonOf(a), this.handler, this.deps.maxErrorBytes));
      const states = await this.outside.fail(failures);
      for (const [i, a] of err.culprits.entries()) this.outside.announceFailures([a], states, failures[i].error);
      // An attempt that met a back-off asked for a pause of the downstream: written now, on its own,
      // not run again at once with the others.
      const backedOff = attempts.flatMap((a): [Attempt, BackOff][] => {
        const r = results.get(a);
        return r && !r.ok && r.backOff && !err.culprits.includes(a) ? [[a, r.backOff]] : [];
      });
      await this.outside.backOff(backedOff);
      const rest = attempts.filter((a) => !err.culprits.includes(a) && !backedOff.some(([b]) => b === a));
      // A back-off of the whole queue (or its limiter) holds the others too: given back uncounted,
      // they wait for its end like the queue's other tasks instead of running again now.
      if (backedOff.some(([, b]) => holdsWholeQueue(b, this.handler))) {
        await this.release(rest);
        return [];
      }
      return rest;
    }
    // The transaction itself failed (no pool connection in time, lock or connection lost, commit
    // refused, ...): the attempts that ran failed with that error; the ones that never reached
    // their handler go back uncounted at once (docs/design.md, "A task, a claim, a lease"), for this or another worker to claim.
    // So do all of them when the server said it was its own state (a failover: isConnectionLost).
    this.deps.logger.error(`transaction for queue "${this.handler.queue}" failed: ${(err as Error)?.message ?? err}`);
    const ran = isConnectionLost(err) ? [] : [...results.keys(), ...(current ? [current] : [])];
    if (ran.length > 0) {
      const states = await this.outside.fail(ran.map((a) => failureOf(a, err, this.handler, this.deps.maxErrorBytes)));
      this.outside.announceFailures(ran, states, String(err));
    }
    await this.release(attempts.filter((a) => !ran.includes(a)));
    return [];
  }

  /** Ends the statement a given-up handler may still run in this batch's still-open transaction. */
  private async cancelStatement(backend: BatchBackend): Promise<void> {
    try {
      await this.deps.repo.cancelStatement(this.deps.prisma, backend);
    } catch (err) {
      // statement_timeout (set by lockLeases) still ends it.
      this.deps.logger.warn(`could not cancel a stuck statement of "${this.handler.queue}": ${(err as Error).message}`);
    }
  }

  private release(attempts: Attempt[]): Promise<void> {
    return releaseAttempts(this.deps, attempts, `tasks of "${this.handler.queue}"`);
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

/**
 * Outcomes of transactional attempts whose transaction did not commit (transactional.runner.ts,
 * recover), written on their own, each statement committing by itself. A database that does not
 * answer, or a row a business transaction holds, leaves them owed (OwedOutcomes), not lost.
 */
export class OutsideOutcomes {
  constructor(
    private readonly deps: WorkerDeps,
    private readonly handler: RegisteredHandler,
    /** Asks the worker to look for due tasks again in `ms`. */
    private readonly wakeIn: (ms: number) => void,
  ) {}

  /** Records failed attempts; null when the database could not be reached (then owed). */
  async fail(failures: Failure[]): Promise<Map<string, Outcome> | null> {
    try {
      return await this.deps.repo.fail(this.deps.prisma, failures, this.handler.options.retryBlocksGroup);
    } catch (err) {
      // Written once it answers again (see OwedOutcomes), else the leases expire and the rescuer retries the tasks.
      this.deps.owed?.fail(failures, this.handler.options.retryBlocksGroup);
      this.deps.logger.error(`could not record failed attempts (recorded once the database answers): ${(err as Error).message}`);
      return null;
    }
  }

  /** Publishes what `fail` made of each attempt: a failure that matched no row means the lease had already been taken over. */
  announceFailures(attempts: Attempt[], states: Map<string, Outcome> | null, error: string): void {
    for (const a of attempts) publishOutcome(this.deps, a, states === null ? 'pending' : states.get(a.task.id) ?? 'lost', error);
  }

  /** Writes back-offs, each due at its end, and publishes their outcomes. */
  async backOff(backedOff: [Attempt, BackOff][]): Promise<void> {
    if (backedOff.length === 0) return;
    const backOffs = backedOff.map(([, b]) => b);
    const held = new Set<string>();
    let released: GivenBack | null = null;
    try {
      released = await this.deps.repo.backOff(this.deps.prisma, backOffs, held);
    } catch (err) {
      this.deps.logger.error(`could not record back-offs (recorded once the database answers): ${(err as Error).message}`);
    }
    const owed = backOffs.filter((b) => released === null || held.has(b.id));
    if (owed.length > 0) this.deps.owed?.backOff(owed);
    for (const [a, b] of backedOff) {
      const outcome: Outcome = released === null || owed.includes(b) ? 'backed-off' : backOffOutcome(released, b.id);
      publishOutcome(this.deps, a, outcome);
      if (outcome === 'backed-off') this.wakeIn(this.deps.clock.msUntil(b.untilMs));
    }
  }
}

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

/** The limits a transactional batch runs under (see TransactionalRunner). */

/** Past this, a batch transaction stops starting tasks and commits; the rest get a new transaction. */
export const TX_BUDGET_MS = 200;
/**
 * Past this many savepoints (handlers that used ctx.tx), likewise. A backend caches the ids of 64
 * subtransactions; beyond that every snapshot in the cluster must consult pg_subtrans, which slows
 * the whole database ("subtransaction overflow"). Handlers that never touch ctx.tx take none.
 */
export const MAX_SAVEPOINTS = 48;
/**
 * How long a batch waits for a pool connection to start its transaction. Past it the batch's
 * tasks are released uncounted (a small pool slows the queue, never kills tasks) and claimed
 * again; a long wait would only keep them from workers that have a connection.
 */
export const TX_START_WAIT_MS = 2000;
/** Server-side idle-in-transaction limit beyond the handler timeout (see lockLeases). */
export const IDLE_GRACE_MS = 1000;
/** How long a timed-out handler may take to settle before its whole transaction is rolled back. */
export const SETTLE_GRACE_MS = 250;
/**
 * Server-side limit on any one statement of a batch, beyond the handler timeout: only a backstop
 * for when the cancel of a stuck handler's statement cannot be sent.
 */
export const STATEMENT_GRACE_MS = 2000;

/**
 * Whether a batch transaction that has run `ran` tasks stops starting more (they get the next
 * transaction): past its time budget, at MAX_SAVEPOINTS, or when the worker is stopping. The first
 * task always runs.
 */
export function batchTransactionFull(s: { ran: number; elapsedMs: number; savepoints: number; stopping: boolean }): boolean {
  return s.ran > 0 && (s.elapsedMs > TX_BUDGET_MS || s.savepoints >= MAX_SAVEPOINTS || s.stopping);
}

/**
 * Thrown inside the transaction to roll all of it back: a handler stuck past its timeout, a
 * shutdown past its deadline, tasks cancelled while they ran, or tasks whose follow-ups could not
 * be inserted (their writes must not commit). `culprits` get a recorded outcome (`reasons`: the
 * error of each, when it is not implied by `why`); the other attempts run again.
 */
export class RollbackAll extends Error {
  constructor(
    readonly why: 'stuck-handler' | 'shutdown' | 'cancelled' | 'follow-ups',
    readonly culprits: Attempt[],
    readonly reasons = new Map<Attempt, Error>(),
  ) {
    super(why);
  }
}
