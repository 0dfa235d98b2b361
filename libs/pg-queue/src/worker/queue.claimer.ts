import type { RegisteredHandler } from '../discovery/task-handler.registry';
import { hasFlowControl } from '../pg-queue.options';
import { newClaimId } from '../sql/claim.sql';
import { LIMITED_CLAIM_BOUNDS } from '../sql/limits.repository';
import { Attempt, byAgedOrder, byClaimOrder } from './attempt';
import { logLine } from './error-text';
import { releaseAttempts, type WorkerDeps } from './worker.deps';

/** The most a worker waits after another instance's freed-room notice before it claims (roomNotice). */
const ROOM_JITTER_MS = 20;

/**
 * The claims of one queue's worker: plain, or under the queue's flow-control rules
 * (LimitsRepository). Each claim feeds the database clock and hands the next due time to the
 * worker's timer; group tasks a rival claim beat are given back before they start. Room that an
 * ending frees in a queue with a concurrency rule and that this instance will not take is
 * announced (`announceFreedRoom`). The last claim's outcome is kept for health checks.
 */
export class QueueClaimer {
  /** The queue has flow-control rules: claims go through LimitsRepository. */
  readonly limited: boolean;
  /** A claimed task holds a slot or a start of one of its rules: every rule but priority aging (see ClaimSizer.nextClaim). */
  readonly holdsSlots: boolean;
  /**
   * The queue has a concurrency rule (global or per partition): an ending frees room that only a
   * claim sees, so the worker claims again after each (a rate limit's room frees with time), or,
   * where endingFrees, when its handler returns.
   */
  readonly roomLimited: boolean;
  /** A concurrency rule counts every running task of the queue: its globalConcurrency, or its limiter's concurrency. */
  readonly countsAllRunning: boolean;
  /**
   * A lease queue whose concurrency rules are its own (globalConcurrency, partitionConcurrency; not
   * a limiter's, which counts other queues' tasks too): a claim counts the tasks whose handler
   * ended here as free, in the queue and in their partitions, before their endings are written
   * (see claim), so a slot freed here can be claimed at once.
   */
  readonly endingFrees: boolean;
  /** The last claim left no room under such a rule (see RefillPolicy.slotFreed). */
  limitFull = false;
  lastClaimAt: number | null = null;
  /** The last claim took nothing because the queue is paused as a whole (see pause.sql.ts). */
  sawPaused = false;
  /** The last claim's error as one line; null once a claim succeeds. */
  lastClaimError: string | null = null;
  /** When the claim in flight was sent; null when none is. */
  private inFlightSince: number | null = null;
  private announcing = false;
  private closed = false;
  /** Announcements asked for and not yet answered (close() waits for them). */
  private readonly announcements = new Set<Promise<void>>();

  constructor(
    private readonly handler: RegisteredHandler,
    private readonly deps: WorkerDeps,
    /** The worker's timer: the queue's next task is due in `ms`. */
    private readonly wakeIn: (ms: number) => void,
    /** Lease tokens of tasks whose handler ended here and whose ending is not written yet (LeaseRunner.ending). */
    private readonly ending: () => string[] = () => [],
  ) {
    const o = handler.options;
    this.limited = hasFlowControl(o);
    this.holdsSlots = o.globalConcurrency !== null || o.partitionConcurrency !== null || o.rateLimit !== null || o.limiter !== null;
    const limiter = o.limiter === null ? undefined : deps.limiters.get(o.limiter);
    this.countsAllRunning = o.globalConcurrency !== null || (limiter?.concurrency ?? null) !== null;
    this.roomLimited = this.countsAllRunning || o.partitionConcurrency !== null;
    this.endingFrees = o.mode === 'lease' && (o.globalConcurrency !== null || o.partitionConcurrency !== null) && (limiter?.concurrency ?? null) === null;
  }

  /**
   * Claims up to `limit` tasks, in claim order. A failure is recorded, then rethrown; the claim may
   * have committed all the same (the connection broke before its answer came), so what it took is
   * owed back, found by the claim's id (see OwedOutcomes) instead of waiting out its leases.
   */
  async claim(limit: number): Promise<Attempt[]> {
    this.inFlightSince = Date.now();
    const claimId = newClaimId();
    try {
      const attempts = await this.claimOnce(limit, claimId);
      this.lastClaimAt = Date.now();
      this.lastClaimError = null;
      // The database answers again: what is owed goes back now, not at the next reconnect or pass.
      if (this.deps.owed?.due) void this.deps.owed.settle(this.deps.prisma, this.deps.repo);
      return attempts;
    } catch (err) {
      this.lastClaimError = logLine(err);
      this.deps.owed?.lostClaim(this.handler.queue, claimId);
      throw err;
    } finally {
      this.inFlightSince = null;
    }
  }

  /**
   * A claim in flight past every bound it runs under (a stalled network: the server has ended its
   * transaction by then, as claim_limited claims only within statementMs and tcp_user_timeout
   * drops a connection its reply cannot reach, but no answer reaches this process), as one line;
   * else null.
   */
  stuckClaim(now = Date.now()): string | null {
    const ms = this.inFlightSince === null ? 0 : now - this.inFlightSince;
    return ms > LIMITED_CLAIM_BOUNDS.transactionMs ? `claim of "${this.handler.queue}" in flight for ${ms} ms (bound ${LIMITED_CLAIM_BOUNDS.transactionMs} ms): no answer from the database` : null;
  }

  /**
   * A task of a queue with a concurrency rule ended here while this worker does not claim (it is
   * stopping, or only drains): its slot may be what another instance waits for, and no other
   * statement tells it. A running worker takes the room itself, and its claims announce what they
   * leave to an instance that waits (see `record` in limits.sql.ts). One NOTIFY per burst of
   * endings (coalesced over a macrotask), `!room <queue>`. None after close().
   */
  announceFreedRoom(): void {
    if (this.announcing || this.closed) return;
    this.announcing = true;
    const sent: Promise<void> = new Promise<void>((resolve) => setImmediate(resolve))
      .then(() => {
        this.announcing = false;
        return this.deps.limits.announce(this.deps.prisma, this.handler.queue);
      })
      .catch((err: unknown) => {
        this.deps.logger.warn(`could not announce freed room of "${this.handler.queue}": ${(err as Error).message}`);
      })
      .finally(() => this.announcements.delete(sent));
    this.announcements.add(sent);
  }

  /**
   * Another instance announced room in this queue. Every instance with free slots hears it: each
   * claims after a random pause of up to ROOM_JITTER_MS, not all at once on the queue's lock; the
   * first takes the room, the others find it taken (and say they wait) in a short claim.
   */
  roomNotice(): void {
    this.wakeIn(Math.random() * ROOM_JITTER_MS);
  }

  /**
   * Announces nothing after this; resolves once the announcements already asked for were sent
   * (the last endings' freed room still reaches the other instances).
   */
  async close(): Promise<void> {
    this.closed = true;
    while (this.announcements.size > 0) await Promise.all(this.announcements);
  }

  private async claimOnce(limit: number, claimId: string): Promise<Attempt[]> {
    const { queue, options: o } = this.handler;
    const sentAt = Date.now();
    const claim = this.limited
      ? await this.deps.limits.claim(this.deps.prisma, queue, limit, this.deps.workerId, o.leaseMs, o.maxAttempts, o, claimId, this.endingFrees ? this.ending() : [])
      : await this.deps.repo.claim(this.deps.prisma, queue, limit, this.deps.workerId, o.leaseMs, o.maxAttempts, claimId);
    this.deps.clock.observe(claim.dbNowMs, sentAt, Date.now());
    this.sawPaused = claim.paused === true;
    this.limitFull = claim.full === true;
    if (claim.nextDueInMs !== null) this.wakeIn(claim.nextDueInMs);
    const attempts = claim.rows.map((r) => new Attempt(r));
    const aging = this.handler.options.priorityAgingMs;
    return (await this.withoutGroupRivals(attempts)).sort(aging === null ? byClaimOrder : byAgedOrder(aging));
  }

  /**
   * A group task whose group turns out to have another running task (a rival claim committed
   * while ours ran: see groupRivals in claim.sql.ts) is given back uncounted before it starts.
   */
  private async withoutGroupRivals(attempts: Attempt[]): Promise<Attempt[]> {
    const grouped = attempts.filter((a) => a.groupKey !== null);
    if (grouped.length === 0) return attempts;
    const rivalled = await this.deps.repo.groupRivals(this.deps.prisma, grouped.map((a) => a.lease));
    if (rivalled.size === 0) return attempts;
    const givenWay = attempts.filter((a) => rivalled.has(a.task.id));
    await releaseAttempts(this.deps, givenWay, `rivalled group tasks of "${this.handler.queue}"`, false);
    return attempts.filter((a) => !rivalled.has(a.task.id));
  }
}
