import { keepResult } from './task-result';
import { isConnectionLost } from '../sql/database-error';
import { DatabaseUnavailableError, LeaseLostError, ShutdownAbortError, TaskCancelledError } from '../errors';
import type { RegisteredHandler } from '../discovery/task-handler.registry';
import type { Task, TaskHandlerFn } from '../types';
import type { Attempt } from './attempt';
import { backOffOf, holdsWholeQueue } from './cooldown.request';
import type { BackOff, Failure } from '../sql/statement-values';
import { CompletionBatcher } from './completion.batcher';
import { AttemptContext, type ContextScope } from './attempt.context';
import { invokeTraced, type InvokeOutcome } from './handler.invoker';
import { SandboxPool } from './sandbox.pool';
import { failureOf, publish, publishOutcome, releaseAttempts, reportSink, type WorkerDeps } from './worker.deps';

/**
 * Lease mode: the handler runs outside any transaction while the worker keeps its lease alive
 * (automatic heartbeat every leaseMs / 3, plus ctx.heartbeat()). Completion, failure and heartbeat
 * are fenced by the lease token, so a worker that lost its lease changes nothing; follow-ups are
 * inserted by the same statement as the fenced completion. At-least-once: an attempt whose lease
 * expires mid-way may run again elsewhere, so external effects need an idempotency key.
 */
export class LeaseRunner {
  private readonly active = new Set<Attempt>();
  private readonly batcher: CompletionBatcher;
  private readonly scope: ContextScope;
  private heartbeatTimer: NodeJS.Timeout | null = null;
  private heartbeating = false;
  /** A sandboxed queue's worker threads or processes (see SandboxPool); null runs the handler in process. */
  private readonly sandbox: SandboxPool | null;
  /** The method, or a task sent to the sandbox: either way under the same timeout, abort and heartbeat. */
  private readonly handle: TaskHandlerFn;

  constructor(
    private readonly deps: WorkerDeps,
    private readonly handler: RegisteredHandler,
    /** Asks the worker to look for due tasks again in `ms` (a retry's backoff). */
    private readonly wakeIn: (ms: number) => void,
    /**
     * A handler met a back-off of the whole queue or its limiter, ending at `untilMs` (database
     * clock): no claims until its row is written, which the returned function says (or its end).
     */
    private readonly holdClaims: (untilMs: number) => () => void = () => () => undefined,
  ) {
    this.batcher = new CompletionBatcher(deps.prisma, deps.repo, handler.options.batchSize, handler.options.retryBlocksGroup);
    this.scope = {
      mode: 'lease',
      workerId: deps.workerId,
      rowLimits: deps.rowLimits,
      heartbeat: (a) => this.heartbeatOne(a),
      parentResults: (id) => deps.repo.dependencies.parentResults(deps.prisma, id),
      assertTasksExist: (ids) => deps.repo.dependencies.assertExist(deps.prisma, ids),
      reports: reportSink(deps),
    };
    const sandbox = handler.sandbox ? new SandboxPool(handler.sandbox, handler.queue, handler.options.concurrency) : null;
    this.sandbox = sandbox;
    this.handle = sandbox ? (task: Task, ctx) => sandbox.run(task, ctx) : handler.handle;
  }

  /** Keeps a claimed attempt's lease alive from now on, before its handler starts. */
  hold(a: Attempt): void {
    this.active.add(a);
    this.ensureHeartbeat();
  }

  /** Stops holding an attempt that will not run here (released on shutdown). */
  unhold(a: Attempt): void {
    this.active.delete(a);
    if (this.active.size === 0) this.stopHeartbeat();
  }

  /**
   * Runs the handler, then records the outcome. `handlerDone` is called as soon as the handler has
   * returned or its attempt was aborted (timeout, lost lease, shutdown), so the worker can start
   * the next task while this one's outcome is being written.
   */
  async run(a: Attempt, handlerDone: () => void = () => undefined): Promise<void> {
    this.hold(a);
    try {
      a.beginRun();
      publish(this.deps, a, 'claimed');
      const result = this.handler.workflow
        ? await this.deps.workflows!.run(a, this.handler)
        : await invokeTraced(a, 'lease', this.handler.options.timeoutMs, () => this.handle(a.task, new AttemptContext(a, this.scope, null)));
      a.endRun();
      const backOff = this.backOffOf(a, result);
      // Before the slot frees (a plain queue claims at once): until its row is written, a claim
      // would find the queue open and call the downstream that asked for the pause again.
      const written = backOff !== null && !(backOff instanceof Error) && holdsWholeQueue(backOff, this.handler) ? this.holdClaims(backOff.untilMs) : null;
      handlerDone();
      let recorded: 'written' | 'owed' = 'written';
      try {
        // What the handler reported goes in before its outcome (a failure's log entry comes after its lines).
        await a.reporter?.finish();
        recorded = await this.record(a, result, backOff);
      } finally {
        // Owed (the database did not answer), the row goes in once it answers, maybe after the
        // first claim then: the hold lasts to the back-off's end (ClaimHold ends it there).
        if (recorded === 'written') written?.();
      }
    } finally {
      this.unhold(a);
    }
  }

  /**
   * Lease tokens of the attempts whose handler has ended here (returned, or given up on: a timeout
   * or a cancel) and whose ending is not written yet: their rows still say running, but their
   * slots are free, as the worker's own slots are (see QueueClaimer.claim).
   */
  ending(): string[] {
    const tokens: string[] = [];
    for (const a of this.active) if (a.finished) tokens.push(a.lease.token);
    return tokens;
  }

  /** Attempts held here: running, or claimed and about to run. */
  held(): Attempt[] {
    return [...this.active];
  }

  flush(): Promise<void> {
    return this.batcher.flush();
  }

  /** Ends the sandboxes, if any (shutdown, once this runner's attempts have settled). */
  async close(): Promise<void> {
    await this.sandbox?.close();
  }

  /** Shutdown's deadline passed: outcomes waiting for a row a business transaction holds are given up (see CompletionBatcher). */
  giveUpHeld(): void {
    this.batcher.giveUpHeld();
  }

  /** The back-off a handler's error asks for (null: none; an Error: a scope that names no limiter). */
  private backOffOf(a: Attempt, result: InvokeOutcome | { kind: 'parked' }): BackOff | Error | null {
    if (result.kind !== 'error') return null;
    try {
      return backOffOf(result.error, a, this.handler, this.deps);
    } catch (err) {
      return err instanceof Error ? err : new Error(String(err));
    }
  }

  /** Writes the attempt's outcome; 'owed' when the database could not be reached (see OwedOutcomes). */
  private async record(a: Attempt, result: InvokeOutcome | { kind: 'parked' }, backOff: BackOff | Error | null): Promise<'written' | 'owed'> {
    if (result.kind === 'parked') return 'written'; // a workflow recorded its park (workflow.runner.ts)
    let failure: Failure | null = null;
    let backedOff: BackOff | null = null;
    try {
      // Why a handler that returned still fails: a result that cannot be stored, follow-ups that cannot go in.
      let notCompleted: Error | null = result.kind === 'ok' ? keepResult(a, result.value, this.deps.rowLimits) : null;
      if (result.kind === 'ok' && notCompleted === null) {
        const outcome = await this.batcher.complete(a.ranLease, a.followUps);
        if (typeof outcome === 'string') {
          publishOutcome(this.deps, a, outcome);
          return 'written';
        }
        notCompleted = outcome.failed; // lease still held: recorded as a failed attempt below
      }
      // The server's state, not the task's (a failover: see isConnectionLost): given back uncounted.
      const lostConnection = result.kind === 'error' && isConnectionLost(result.error);
      if (lostConnection || (result.kind === 'aborted' && (result.reason instanceof ShutdownAbortError || result.reason instanceof DatabaseUnavailableError))) {
        await releaseAttempts(this.deps, [a], `task ${a.task.id} of "${a.task.queue}"`);
        return 'written';
      }
      if (result.kind === 'aborted' && result.reason instanceof LeaseLostError) {
        publish(this.deps, a, 'lease-lost');
        return 'written';
      }
      // A back-off the handler asked for (RateLimitedError): given back uncounted, due later, its scope recorded.
      if (backOff !== null && !(backOff instanceof Error)) {
        backedOff = backOff;
        const outcome = await this.batcher.backOff(backOff);
        publishOutcome(this.deps, a, outcome);
        if (outcome === 'backed-off') this.wakeIn(this.deps.clock.msUntil(backOff.untilMs));
        return 'written';
      }
      const error = backOff ?? (result.kind === 'ok' ? notCompleted : result.kind === 'error' ? result.error : result.reason);
      failure = failureOf(a, error, this.handler, this.deps.maxErrorBytes);
      const state = await this.batcher.fail(failure);
      publishOutcome(this.deps, a, state ?? 'lost', failure.error);
      if (state === 'pending') this.wakeIn(failure.delayMs);
    } catch (err) {
      // Could not record the outcome (the database could not be reached): owed, written once it
      // answers (see OwedOutcomes), fenced; a back-off keeps its end and scope; a completion is
      // owed as a release, so the task runs again (at-least-once) instead of waiting out its lease.
      if (failure) this.deps.owed?.fail([failure], this.handler.options.retryBlocksGroup);
      else if (backedOff) this.deps.owed?.backOff([backedOff]);
      else this.deps.owed?.release([a.lease]);
      this.deps.logger.error(`could not record task ${a.task.id} of "${a.task.queue}" (written once the database answers): ${(err as Error).message}`);
      return 'owed';
    }
    return 'written';
  }

  private async heartbeatOne(a: Attempt): Promise<void> {
    if (a.aborted) throw new LeaseLostError(a.task.id);
    const held = await this.deps.repo.heartbeat(this.deps.prisma, [a.lease], this.handler.options.leaseMs);
    this.applyHeartbeat(a, held);
    if (a.aborted) throw a.abortReason;
  }

  private ensureHeartbeat(): void {
    if (this.heartbeatTimer) return;
    const every = Math.max(50, Math.floor(this.handler.options.leaseMs / 3));
    this.heartbeatTimer = setInterval(() => void this.heartbeatAll(), every);
    this.heartbeatTimer.unref();
  }

  private stopHeartbeat(): void {
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    this.heartbeatTimer = null;
  }

  /**
   * One statement extends every lease this runner holds; the ones not extended were lost. One at a
   * time: a heartbeat still under way when the next is due (a slow database) is not joined by
   * another, which would take one more pool connection each interval.
   */
  private async heartbeatAll(): Promise<void> {
    const running = [...this.active].filter((a) => !a.finished && !a.aborted);
    // (includes claimed attempts still waiting for a slot)
    if (running.length === 0 || this.heartbeating) return;
    this.heartbeating = true;
    try {
      const held = await this.deps.repo.heartbeat(this.deps.prisma, running.map((a) => a.lease), this.handler.options.leaseMs);
      for (const a of running) this.applyHeartbeat(a, held);
    } catch (err) {
      this.deps.logger.warn(`heartbeat failed for queue "${this.handler.queue}": ${(err as Error).message}`);
    } finally {
      this.heartbeating = false;
    }
  }

  private applyHeartbeat(a: Attempt, held: Map<string, { cancelled: boolean }>): void {
    if (a.finished) return;
    const lease = held.get(a.lease.token);
    if (!lease) a.abort(new LeaseLostError(a.task.id));
    else if (lease.cancelled) a.abort(new TaskCancelledError(a.task.id));
  }
}
