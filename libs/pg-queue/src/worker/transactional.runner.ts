import { keepResult } from './task-result';
import { LeaseLostError, ShutdownAbortError, TaskCancelledError, TaskTimeoutError } from '../errors';
import type { RegisteredHandler } from '../discovery/task-handler.registry';
import type { BackOff, BatchBackend, GivenBack } from '../sql/statement-values';
import { backOffOf, holdsWholeQueue } from './back-off.request';
import { OutsideOutcomes } from './outside-outcomes';
import { SUCCEEDED, writeBatchOutcomes, type Result } from './batch.commit';
import type { SqlExecutor } from '../types';
import type { Attempt } from './attempt';
import { AttemptContext, type ContextScope } from './attempt.context';
import { invokeTraced } from './handler.invoker';
import { RollbackAll } from './rollback-all';
import { TransactionGate } from './transaction.gate';
import { isConnectionLost } from '../sql/database-error';
import { batchTransactionFull, IDLE_GRACE_MS, SETTLE_GRACE_MS, STATEMENT_GRACE_MS, TX_BUDGET_MS, TX_START_WAIT_MS } from './transaction.limits';
import { failureOf, publish, publishGivenBack, publishOutcome, releaseAttempts, reportSink, type Outcome, type WorkerDeps } from './worker.deps';

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
