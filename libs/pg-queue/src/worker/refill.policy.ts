import type { QueueClaimer } from './queue.claimer';

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
