import type { RegisteredHandler } from '../discovery/task-handler.registry';
import { within } from '../core/within';
import { ShutdownAbortError, TaskCancelledError } from '../errors';
import type { Attempt } from './attempt';
import { ClaimHold } from './claim.hold';
import { claimCeiling, ClaimSizer } from './claim.sizer';
import { LeaseRunner } from './lease.runner';
import { QueueClaimer } from './queue.claimer';
import { TransactionalRunner } from './transactional.runner';
import { WakeTimers } from './wake.timers';
import { releaseAttempts, type WorkerDeps } from './worker.deps';

const TIMED_OUT = Symbol('timed out');

/** One queue's worker loop as a health check sees it (see QueueWorker.status). */
export interface WorkerStatus {
  queue: string;
  state: 'idle' | 'running' | 'stopping' | 'stopped';
  alive: boolean;
  /** Attempts running or waiting for a slot in this process. */
  running: number;
  lastClaimAt: Date | null;
  lastClaimError: string | null;
  /** The queue is paused as a whole (see pause.sql.ts): the loop claims nothing until it is resumed. */
  paused: boolean;
}

/**
 * Runs one queue in this process.
 *
 *   idle ──wake (NOTIFY / poll / slot freed)──▶ claiming ──rows──▶ dispatch ─┐
 *     ▲                                             │ none / short batch      │ full batch and
 *     └─────────────────────────────────────────────┘                        │ capacity left
 *                                                   ◀────────────────────────┘
 *   stop(): stop claiming → wait for running work until the deadline → abort the rest
 *           (transactional: roll back; lease: signal) → release unfinished tasks uncounted.
 *
 * Capacity is counted in tasks for lease mode and in concurrent transactions for transactional mode;
 * ClaimSizer decides how many tasks a claim takes. Lease mode claims ahead: claimed tasks wait in a
 * local buffer (their leases kept alive by the heartbeat) so that claiming overlaps with running
 * handlers instead of waiting for slots to free one by one. One claim is in flight at a time; a
 * wake that arrives meanwhile is remembered by sequence number, never lost.
 */
export class QueueWorker {
  private state: 'idle' | 'running' | 'stopping' | 'stopped' = 'idle';
  /** The claim loop while it runs (drain() waits for it: its claims may already be committed). */
  private filling: Promise<void> | null = null;
  private wakeSeq = 0;
  private claimedSeq = -1;
  private readonly slots: AttemptSlots;
  private readonly timers: WakeTimers;
  private readonly lease: LeaseRunner | null;
  private readonly transactional: TransactionalRunner | null;
  private readonly sizer: ClaimSizer;
  /** The most rows one claim takes (see claimCeiling). */
  private readonly claimCeiling: number;
  private readonly claimer: QueueClaimer;
  private readonly refill: RefillPolicy;
  /** The queue is paused as a whole, as far as this process knows (see PauseWatcher): no claims. */
  private paused = false;
  /** Back-offs of the whole queue met here whose rows are being written: no claims meanwhile. */
  private readonly claimHold = new ClaimHold(() => this.wake(), (attempts) => this.slots.giveBack(attempts));
  /** Changes of `paused` by PauseWatcher: a claim that saw a pause records it only if none came meanwhile. */
  private pauseSeq = 0;

  constructor(
    readonly handler: RegisteredHandler,
    private readonly deps: WorkerDeps,
    /** Current fallback poll period (longer while LISTEN is healthy). */
    pollIntervalMs: () => number,
  ) {
    const o = handler.options;
    this.timers = new WakeTimers(() => this.wake(), pollIntervalMs);
    const wakeIn = (ms: number) => this.wakeIn(ms);
    this.claimer = new QueueClaimer(handler, deps, wakeIn, () => this.lease?.ending() ?? []);
    this.refill = new RefillPolicy(this.claimer, () => this.fill(), () => void this.wakeSeq++, () => this.state === 'running');
    this.claimCeiling = claimCeiling(o.batchSize, deps.rowLimits.maxPayloadBytes);
    this.sizer = new ClaimSizer(this.claimCeiling, o.concurrency);
    this.lease = o.mode === 'lease' ? new LeaseRunner(deps, handler, wakeIn, (untilMs) => this.backedOff(untilMs)) : null;
    this.transactional =
      o.mode === 'transactional'
        ? new TransactionalRunner(deps, handler, () => this.state !== 'running' && this.state !== 'idle', wakeIn, (tasks, ms, leftOver) => this.sizer.ranTransaction(tasks, ms, leftOver))
        : null;
    this.slots = new AttemptSlots(handler.queue, o.concurrency, deps, { lease: this.lease, transactional: this.transactional }, this.sizer, () => this.state === 'stopping', {
      slotFreed: () => this.refill.slotFreed(),
      ended: (ranGroupTask) => this.refill.ended(ranGroupTask),
    });
  }

  get queue(): string {
    return this.handler.queue;
  }

  start(): void {
    if (this.state !== 'idle') return;
    this.state = 'running';
    this.timers.startPolling();
    this.wake();
  }

  /** Something may be claimable: a notification, the poll timer, a retry. */
  wake(): void {
    this.wakeSeq++;
    this.fill();
  }

  /** Another instance announced room in this queue (`!room`, see QueueClaimer.roomNotice). */
  roomFreed(): void {
    this.claimer.roomNotice();
  }

  /**
   * The queue was paused or resumed as a whole (PauseWatcher). Paused, the loop claims nothing
   * (running and claimed work goes on); resumed, it claims at once. Only saves claims: the claim
   * statements themselves never take a paused queue's tasks (pause.sql.ts).
   */
  setPaused(paused: boolean): void {
    this.pauseSeq++;
    if (this.paused === paused) return;
    this.paused = paused;
    if (!paused) this.wake();
  }

  get isPaused(): boolean {
    return this.paused;
  }

  /** A task becomes due in `ms`: wake then, unless an earlier wake-up is already set. */
  wakeIn(ms: number): void {
    if (this.state !== 'running') return;
    if (ms <= 0) return this.wake();
    this.timers.dueIn(ms);
  }

  /** A running task of this queue was cancelled: abort its handler if it runs here. */
  cancel(taskId: string): boolean {
    const attempt = this.running().find((a) => a.task.id === taskId && !a.finished);
    // Set aside by a back-off, it would wait unheeded (its lease no longer kept alive): given back now, it ends cancelled.
    if (attempt && !this.claimHold.giveBackNow(attempt)) attempt.abort(new TaskCancelledError(taskId));
    return attempt !== undefined;
  }

  /**
   * For health checks: the loop runs (started, not stopping) and its last claim did not fail. An idle
   * loop claims only when woken, so the time of its last claim says nothing about its health.
   */
  status(): WorkerStatus {
    const error = this.claimer.stuckClaim() ?? this.claimer.lastClaimError;
    return {
      queue: this.queue,
      state: this.state,
      alive: this.state === 'running' && error === null,
      running: this.slots.inFlight,
      lastClaimAt: this.claimer.lastClaimAt === null ? null : new Date(this.claimer.lastClaimAt),
      lastClaimError: error,
      paused: this.paused,
    };
  }

  /** Stops claiming, waits for running work until `deadline` (epoch ms), then aborts what is left. */
  async stop(deadline: number): Promise<void> {
    if (this.state === 'stopped') return;
    this.state = 'stopping';
    this.timers.stop();
    // A claim in flight may still commit: its tasks must reach the buffer before it is released.
    // Not past the deadline: a claim with no answer (a stalled network) may never come back; if it
    // does, its tasks are given back then (see claimWhileRoom), else their leases expire.
    if (this.filling && (await within(this.filling, deadline - Date.now(), TIMED_OUT)) === TIMED_OUT) {
      this.deps.logger.warn(`shutdown: a claim of "${this.queue}" got no answer before the deadline; stopping without it`);
    }
    await this.slots.releaseBuffered();
    const finished = await this.slots.settleWithin(Math.max(0, deadline - Date.now()));
    if (!finished) {
      // Transactional attempts see the abort and roll their transaction back; lease attempts are released.
      for (const a of this.running()) a.abort(new ShutdownAbortError());
      this.lease?.giveUpHeld();
      await this.slots.settleWithin(Number.MAX_SAFE_INTEGER);
    }
    await this.lease?.flush();
    // After the attempts that met back-offs wrote them (settled), unless owed: tasks set aside go back.
    await this.claimHold.giveBackAll();
    await this.lease?.close();
    await this.claimer.close(); // the last endings' freed-room announce, and none after
    this.state = 'stopped';
  }

  /**
   * Attempts that ran to their end here so far, however they were claimed (the worker loop or a
   * drain): a drain counts those that ended while it ran, including ones started before it.
   */
  get finished(): number {
    return this.slots.finished;
  }

  /** No claim in flight and no attempt running or waiting for a slot here. */
  get idle(): boolean {
    return this.filling === null && this.slots.inFlight === 0 && this.slots.waiting === 0 && !this.claimHold.holding;
  }

  /**
   * Test helper (see QueueDrainer): claims and runs due tasks inline until none is left, waiting
   * for the attempts the worker loop holds too (those it claimed before the drain included). False
   * when `deadline` (epoch ms) passed with attempts still running here. Works whether or not the
   * worker was started; `finished` counts what ended.
   */
  async drain(deadline: number): Promise<boolean> {
    for (;;) {
      if (!(await this.quiesce(deadline))) return false;
      const rows = await this.claimer.claim(this.claimCeiling);
      if (rows.length > 0) this.slots.dispatch(rows);
      else if (this.idle) return true;
    }
  }

  /** Waits until no claim is in flight and no attempt runs or waits here; false past `deadline`. */
  private async quiesce(deadline: number): Promise<boolean> {
    while (this.filling || this.slots.inFlight > 0) {
      await this.filling;
      if (!(await this.slots.settleWithin(Math.max(0, deadline - Date.now())))) return false;
    }
    return true;
  }

  /**
   * A lease handler met a back-off of the whole queue (or its limiter) ending at `untilMs`: no
   * claims until its row is written (the returned function says so), and the tasks claimed ahead
   * start no more (ClaimHold gives them back).
   */
  private backedOff(untilMs: number): () => void {
    const written = this.claimHold.hold(this.deps.clock.msUntil(untilMs));
    this.claimHold.setAside(this.slots.takeBuffered());
    return written;
  }

  /** Attempts this worker holds: running, or (lease mode) waiting in the buffer. */
  private running(): Attempt[] {
    return this.slots.held();
  }

  /** What the next claim takes, and how its rows are split into transactions (ClaimSizer.nextClaim). */
  private nextClaim(): { want: number; perTransaction: number } {
    return this.sizer.nextClaim(this.handler.options.mode, this.claimer, this.slots.taken, this.slots.waiting);
  }

  private fill(): void {
    // Checked here too, not only in the loop: fill() runs after every task, mostly with nothing to do.
    if (this.filling || this.state !== 'running' || this.paused || this.claimedSeq === this.wakeSeq || this.nextClaim().want === 0) return;
    const heldFor = this.claimHold.heldForMs;
    if (heldFor > 0) {
      this.timers.dueIn(heldFor); // its end, should the write take that long
      return;
    }
    this.filling = this.claimWhileRoom().then((ended) => {
      this.filling = null;
      // A slot freed or a wake that came while the loop was finishing found it still running.
      if (ended) this.fill();
    });
  }

  /** Claims while there is room and maybe work; false when a claim failed (a retry is scheduled). */
  private async claimWhileRoom(): Promise<boolean> {
    try {
      while (this.state === 'running' && !this.paused && this.claimedSeq !== this.wakeSeq && this.claimHold.heldForMs === 0) {
        // `perTransaction` fixed with `want`: the batches must not outnumber the free transactions.
        const { want, perTransaction } = this.nextClaim();
        if (want === 0) break;
        const seq = this.wakeSeq;
        const pauseSeq = this.pauseSeq;
        const mark = this.claimHold.mark;
        const rows = await this.claimer.claim(want);
        // Paused, and this process missed the notice: stop claiming until a resume (unless one came meanwhile).
        if (this.claimer.sawPaused && pauseSeq === this.pauseSeq) this.paused = true;
        if (this.state !== 'running') {
          // Came back after stop() gave up waiting for it: nothing may start now. Given back while
          // the app is still closing; once stopped, the database is not touched (leases expire).
          if (this.state === 'stopping') await releaseAttempts(this.deps, rows, `late-claimed tasks of "${this.queue}"`, false);
          break;
        }
        // Sent before a handler here met a back-off of the whole queue: its tasks would meet it too.
        if (this.claimHold.metSince(mark)) {
          for (const a of rows) this.lease?.hold(a); // leases kept alive until given back
          this.claimHold.setAside(rows);
          break;
        }
        // A short batch means the queue is empty for now, unless a wake came in meanwhile. The
        // claim then also said when the next task is due: the timer takes over from there.
        if (rows.length < want) this.claimedSeq = seq;
        if (rows.length > 0) this.slots.dispatch(rows, perTransaction);
      }
      return true;
    } catch (err) {
      if (this.state !== 'running') return false;
      this.deps.logger.error(`claim failed for queue "${this.queue}": ${this.claimer.lastClaimError}`);
      this.timers.retryAfter(1000);
      return false;
    }
  }
}

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

/** The work a queue worker has started (transactional batches, lease attempts), until it settles. */
export class WorkInFlight {
  private readonly work = new Set<Promise<void>>();

  get size(): number {
    return this.work.size;
  }

  add(p: Promise<void>): void {
    this.work.add(p);
  }

  delete(p: Promise<void>): void {
    this.work.delete(p);
  }

  /** Waits until all work has settled (true), or `ms` have passed with work left (false). */
  async settleWithin(ms: number): Promise<boolean> {
    const deadline = Date.now() + ms;
    while (this.work.size > 0) {
      const left = deadline - Date.now();
      if (left <= 0) return false;
      let timer: NodeJS.Timeout | undefined;
      const timedOut = await Promise.race([
        Promise.allSettled([...this.work]).then(() => false),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(true), Math.min(left, 2 ** 31 - 1));
        }),
      ]);
      clearTimeout(timer);
      if (timedOut) return this.work.size === 0;
    }
    return true;
  }
}

/**
 * When a queue worker claims again after its work frees room: at once for a plain queue; for a
 * limited one after the burst of endings, and, under a rule that counts every running task of the
 * queue, only once the room is there to take (for a lease queue whose concurrency rules are its
 * own: when its handlers return, see QueueClaimer.endingFrees).
 */
export class RefillPolicy {
  /** A fill is queued for after the current burst of freed slots (see soon). */
  private queued = false;

  constructor(
    private readonly claimer: QueueClaimer,
    private readonly fill: () => void,
    /** A wake no NOTIFY brings: the worker claims again even after a short claim. */
    private readonly wake: () => void,
    private readonly claiming: () => boolean,
  ) {}

  /**
   * A slot is free here. Under a rule that counts every running task of the queue (its global
   * concurrency, its limiter's) that the last claim left full, the task counts as running until
   * its ending is written, which in lease mode comes a moment after its handler returns: a claim
   * now would find no room (see limited-claim-size.spec). It claims when the
   * ending is in (ended). With room left, or under a partition's concurrency (other partitions may
   * have room), it claims now. A lease queue whose concurrency rules are its own (endingFrees)
   * claims now in any case, woken as by a NOTIFY: its claim counts the tasks whose handlers
   * returned here as free, written or not, so their endings need not wake it again.
   */
  slotFreed(): void {
    if (this.claimer.endingFrees) this.wake();
    if (this.claimer.endingFrees || !(this.claimer.countsAllRunning && this.claimer.limitFull)) this.now();
  }

  /** Work ended, its outcome written (see AttemptSlots). */
  ended(ranGroupTask: boolean): void {
    // A finished group task lets the next of its group run, an ending under a concurrency rule frees
    // room: no NOTIFY says either. The room is this worker's to take (an endingFrees queue took it
    // when the handler returned); if it does not claim, it hands it on.
    if (ranGroupTask || (this.claimer.roomLimited && !this.claimer.endingFrees)) this.wake();
    if (this.claimer.roomLimited && !this.claiming()) this.claimer.announceFreedRoom();
    this.now();
  }

  /** Room may have freed: a limited queue claims once the burst of endings is in (see soon), others at once. */
  private now(): void {
    if (this.claimer.limited) this.soon();
    else this.fill();
  }

  /**
   * A limited queue claims only for free slots, and its handlers' slots often free in one burst
   * (a claim's tasks end together): claimed at once, the first freed slot would get a claim of its
   * own and the rest wait for it. One claim after the burst instead (a macrotask later).
   */
  private soon(): void {
    if (this.queued) return;
    this.queued = true;
    setImmediate(() => {
      this.queued = false;
      this.fill();
    });
  }
}
