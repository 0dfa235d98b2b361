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
