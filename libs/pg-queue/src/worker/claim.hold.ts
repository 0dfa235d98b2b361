import type { Attempt } from './attempt';

/**
 * Holds a queue worker's claims while back-offs of the whole queue (or its limiter) met here are
 * being written: a claim before a back-off's row is written would find the queue open and call
 * the downstream that asked for the pause again; once written, the row holds back every
 * instance's claims, this one's included, until its end. Each hold is bounded by its back-off's
 * end. The tasks this instance claimed ahead start no more: given back uncounted once the row is
 * written (before, another instance could claim them), they wait for its end like the queue's other
 * tasks; so do a claim's rows that come back after the back-off was met (see QueueWorker).
 */
export class ClaimHold {
  /** Back-offs being written. */
  private holds = 0;
  /** Back-offs met so far, and the latest end of any (performance.now()). */
  private met = 0;
  private latestEnd = 0;

  /** Attempts set aside while holds are in force, given back once the last is released. */
  private readonly aside = new Set<Attempt>();
  /** Give-backs under way (stop() waits for them). */
  private readonly givingBack = new Set<Promise<void>>();

  constructor(
    /** Called once the last hold is released: the worker claims again. */
    private readonly released: () => void,
    /** Gives attempts back uncounted. */
    private readonly giveBack: (attempts: Attempt[]) => Promise<void>,
  ) {}

  /**
   * A back-off that ends in `ms`; the returned function releases it (its row is written). It is
   * released at its end in any case: its row may still wait for a row a business transaction
   * holds, or for the database to answer (then owed), and past its end nothing is gained.
   */
  hold(ms: number): () => void {
    this.holds++;
    this.met++;
    this.latestEnd = Math.max(this.latestEnd, performance.now() + ms);
    let done = false;
    const release = () => {
      if (done) return;
      done = true;
      if (--this.holds > 0) return;
      void this.giveBackAll();
      this.released();
    };
    setTimeout(release, ms).unref();
    return release;
  }

  /** Attempts that must not start under the back-offs met: given back once their rows are written (at once if none is being written). */
  setAside(attempts: Attempt[]): void {
    for (const a of attempts) this.aside.add(a);
    if (this.holds === 0) void this.giveBackAll();
  }

  /** Gives back at once an attempt set aside (its cancel was requested); false if it is not aside. */
  giveBackNow(a: Attempt): boolean {
    if (!this.aside.delete(a)) return false;
    this.track(this.giveBack([a]));
    return true;
  }

  /** Gives back every attempt set aside, and waits for the give-backs under way (the worker stops). */
  async giveBackAll(): Promise<void> {
    const all = [...this.aside];
    this.aside.clear();
    if (all.length > 0) this.track(this.giveBack(all));
    while (this.givingBack.size > 0) await Promise.all(this.givingBack);
  }

  /** Attempts set aside or being given back: the worker is not idle while there are any. */
  get holding(): boolean {
    return this.aside.size > 0 || this.givingBack.size > 0;
  }

  private track(p: Promise<void>): void {
    const tracked = p.finally(() => this.givingBack.delete(tracked));
    this.givingBack.add(tracked);
  }

  /** A mark to pass to metSince (before a claim is sent). */
  get mark(): number {
    return this.met;
  }

  /** A back-off met since `mark` is still in force: what a claim sent before it took is to be given back. */
  metSince(mark: number): boolean {
    return this.met !== mark && performance.now() < this.latestEnd;
  }

  /** Ms until no hold is in force (0: none is). */
  get heldForMs(): number {
    return this.holds > 0 ? Math.max(0, this.latestEnd - performance.now()) : 0;
  }
}
