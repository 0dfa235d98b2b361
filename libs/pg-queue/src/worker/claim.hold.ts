/**
 * Holds a queue worker's claims while back-offs of the whole queue (or its limiter) met here are
 * being written: a claim before a back-off's row is written would find the queue open and call
 * the downstream that asked for the pause again; once written, the row holds back every
 * instance's claims, this one's included, until its end. Each hold is bounded by its back-off's
 * end. Tasks claimed ahead still run.
 */
export class ClaimHold {
  /** Back-offs being written. */
  private holds = 0;
  /** The latest of their ends (performance.now()). */
  private until = 0;

  constructor(
    /** Called once the last hold is released: the worker claims again. */
    private readonly released: () => void,
  ) {}

  /** A back-off that ends in `ms`; the returned function releases it (its row is written). */
  hold(ms: number): () => void {
    this.holds++;
    this.until = Math.max(this.until, performance.now() + ms);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      if (--this.holds > 0) return;
      this.until = 0;
      this.released();
    };
  }

  /** Ms until no hold is in force (0: none is). */
  get heldForMs(): number {
    return this.holds > 0 ? Math.max(0, this.until - performance.now()) : 0;
  }
}
