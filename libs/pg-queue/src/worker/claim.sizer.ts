/**
 * How many tasks a worker claims at once. `batchSize` is the ceiling; below it the size follows
 * the queue's measured pace, so a fast queue claims big batches (few round trips per task) while a
 * slow one claims about what it can start now and leaves the rest to other instances.
 *
 * - Lease mode keeps `concurrency` slots busy plus a look-ahead: the tasks it expects to start
 *   within AHEAD_MS at the recent completion rate, at most two batches. A claim is made once at
 *   least half the look-ahead (at least one task) is missing, so a fast queue claims full batches
 *   while a batch still waits (fewer, larger statements: each costs a fixed amount of CPU in the
 *   driver stack). The price: when a fast queue's handlers suddenly stall, the stale rate
 *   keeps claiming for up to a second (it is forgotten after 1 s of quiet), so up to two batches
 *   wait here, leases kept alive, until the handlers move again; other instances cannot take them.
 * - Transactional mode sizes each transaction's batch to about TX_TARGET_MS of handler time at
 *   the recent time per task, starting from one task until a first measure exists, and to no more
 *   than the last transaction could run when it hit its time or savepoint limit.
 */
const AHEAD_MS = 100;

/** How a queue's rules bound its claims (see QueueClaimer). */
export interface ClaimRules {
  /** Its claims go through claim_limited, under the queue's lock. */
  limited: boolean;
  /** A claimed task holds a slot or a start of one of its rules while it waits: every rule but priority aging. */
  holdsSlots: boolean;
}
const TX_TARGET_MS = 50;
/** A lease-mode queue with no completion for this long has no current pace. */
const QUIET_MS = 1000;
/** Weight of the newest measure in the moving averages. */
const NEW_WEIGHT = 0.3;

export class ClaimSizer {
  private ratePerMs = 0;
  private windowStart: number;
  private windowCount = 0;
  private msPerTask: number | null = null;
  /** How many tasks the last transaction could run, when it could not run its whole batch. */
  private fitsInTransaction: number | null = null;

  constructor(
    private readonly batchSize: number,
    private readonly concurrency: number,
    /** Milliseconds on a monotonic clock (replaceable in unit tests). */
    private readonly now: () => number = () => performance.now(),
  ) {
    this.windowStart = now();
  }

  /** Lease mode: a handler finished. */
  finished(): void {
    const now = this.now();
    if (now - this.windowStart > QUIET_MS) {
      // The first completion after a quiet spell (or since start): the old pace says nothing.
      this.ratePerMs = 0;
      this.windowStart = now;
      this.windowCount = 0;
    }
    this.windowCount++;
    const elapsed = now - this.windowStart;
    // Fold the window into the rate every 20 ms, or sooner once two rounds of slots have finished:
    // a burst on a fast queue then claims full batches within milliseconds.
    if (elapsed >= 20 || (elapsed >= 1 && this.windowCount >= 2 * this.concurrency)) {
      this.ratePerMs = this.ratePerMs === 0 ? this.windowCount / elapsed : this.ratePerMs * (1 - NEW_WEIGHT) + (this.windowCount / elapsed) * NEW_WEIGHT;
      this.windowStart = now;
      this.windowCount = 0;
    }
  }

  /** Lease mode: how many tasks to claim now, given the slots in use and the claimed ones waiting. */
  leaseClaim(busy: number, waiting: number): number {
    const idleFor = this.now() - this.windowStart;
    // A queue that has been quiet for a while starts over from its slots.
    const rate = idleFor > QUIET_MS ? 0 : this.ratePerMs;
    const lookahead = Math.min(2 * this.batchSize, Math.ceil(rate * AHEAD_MS));
    const room = this.concurrency + lookahead - busy - waiting;
    return room >= Math.max(1, Math.floor(lookahead / 2)) ? Math.min(room, this.batchSize) : 0;
  }

  /**
   * Transactional mode: a transaction ran `tasks` handlers in `ms`; `leftOver` tasks of its batch
   * had to wait for another transaction (time budget or savepoint limit reached).
   */
  ranTransaction(tasks: number, ms: number, leftOver: number): void {
    if (tasks === 0) return;
    const per = ms / tasks;
    this.msPerTask = this.msPerTask === null ? per : this.msPerTask * (1 - NEW_WEIGHT) + per * NEW_WEIGHT;
    this.fitsInTransaction = leftOver > 0 ? tasks : null;
  }

  /** Transactional mode: the batch for the next transaction. */
  transactionClaim(): number {
    if (this.msPerTask === null) return 1;
    const byTime = this.msPerTask <= 0 ? this.batchSize : Math.floor(TX_TARGET_MS / this.msPerTask);
    return Math.max(1, Math.min(this.batchSize, byTime, this.fitsInTransaction ?? Infinity));
  }

  /**
   * What the next claim takes: `want` tasks at most, run (transactional mode) in transactions of at
   * most `perTransaction` each. `taken`: slots in use (lease attempts, or transactions); `waiting`:
   * lease attempts claimed ahead. A lease queue whose claimed task holds a slot of a rule (or a
   * start of its rate window) while it waits (`rules.holdsSlots`) claims no look-ahead; under
   * priority aging alone a claimed task holds nothing, and it claims ahead as a plain queue does.
   * A flow-controlled (`rules.limited`) queue's transactional worker claims for every free
   * transaction at once, each batch in a transaction of its own: claims under the queue's lock are
   * what bounds it. Otherwise one transaction's batch at a time.
   */
  nextClaim(mode: 'lease' | 'transactional', rules: ClaimRules, taken: number, waiting: number): { want: number; perTransaction: number } {
    if (mode === 'lease') {
      const want = rules.holdsSlots ? Math.min(this.batchSize, Math.max(0, this.concurrency - taken - waiting)) : this.leaseClaim(taken, waiting);
      return { want, perTransaction: Infinity };
    }
    const free = Math.max(0, this.concurrency - taken);
    const perTransaction = this.transactionClaim();
    if (rules.limited) return { want: Math.min(this.batchSize, free * perTransaction), perTransaction };
    return { want: free > 0 ? perTransaction : 0, perTransaction: Infinity };
  }
}

/**
 * The most payload bytes one claim may bring back. A claim returns its rows as one JSON text, which
 * must stay far below V8's string limit (about 512 MB) and Postgres's (1 GB) even when every
 * payload is as large as `maxPayloadBytes` allows (jsonb prints up to about twice its input).
 */
const CLAIM_PAYLOAD_BUDGET = 128 * 1024 * 1024;

/** The most rows one claim takes: batchSize, or fewer when large payloads would pass CLAIM_PAYLOAD_BUDGET. */
export function claimCeiling(batchSize: number, maxPayloadBytes: number): number {
  return Math.min(batchSize, Math.max(1, Math.floor(CLAIM_PAYLOAD_BUDGET / maxPayloadBytes)));
}
