import { ClaimSizer, type ClaimRules } from './claim.sizer';

/** A ClaimSizer on a clock the test moves by hand. */
function sizer(batchSize: number, concurrency: number) {
  let t = 0;
  const s = new ClaimSizer(batchSize, concurrency, () => t);
  return {
    s,
    /** `n` completions spread evenly over `ms`. */
    complete(n: number, ms: number) {
      for (let i = 0; i < n; i++) {
        t += ms / n;
        s.finished();
      }
    },
    wait(ms: number) {
      t += ms;
    },
  };
}

describe('ClaimSizer, lease mode', () => {
  it('claims only what its slots can start while it knows nothing of the pace', () => {
    const { s } = sizer(500, 10);
    expect(s.leaseClaim(0, 0)).toBe(10);
    expect(s.leaseClaim(4, 0)).toBe(6);
    expect(s.leaseClaim(10, 0)).toBe(0);
  });

  it('claims ahead of a fast queue in full batches of batchSize, keeping up to two batches waiting', () => {
    const { s, complete } = sizer(500, 10);
    complete(2000, 100); // 20 000 tasks/s: 2 000 expected in the next 100 ms, capped at 2 × 500
    expect(s.leaseClaim(10, 0)).toBe(500); // never more than batchSize at once
    expect(s.leaseClaim(10, 500)).toBe(500);
    // Half the look-ahead still waits: no claim yet (no trickle of small claims).
    expect(s.leaseClaim(10, 501)).toBe(0);
  });

  it('keeps a slow queue to its slots, so other instances get the rest', () => {
    const { s, complete } = sizer(500, 10);
    complete(10, 1000); // 10 tasks/s: one task expected in the next 100 ms
    expect(s.leaseClaim(10, 0)).toBe(1);
    expect(s.leaseClaim(10, 1)).toBe(0);
    expect(s.leaseClaim(0, 0)).toBe(11);
  });

  it('measures the pace of a burst within milliseconds, also after quiet spells', () => {
    const { s, complete, wait } = sizer(500, 10);
    wait(5000); // started five seconds ago, nothing to do since
    complete(20, 4); // two rounds of slots in 4 ms: 5 000 tasks/s
    expect(s.leaseClaim(0, 0)).toBe(500);
    wait(1500);
    complete(20, 2); // and again after the next quiet spell
    expect(s.leaseClaim(0, 0)).toBe(500);
  });

  it('forgets the pace of a queue that has been quiet for a second', () => {
    const { s, complete, wait } = sizer(500, 10);
    complete(2000, 100);
    wait(1500);
    expect(s.leaseClaim(0, 0)).toBe(10);
  });
});

describe('ClaimSizer, transactional mode', () => {
  it('starts with one task per transaction, then sizes batches to about 50 ms of handler time', () => {
    const { s } = sizer(500, 10);
    expect(s.transactionClaim()).toBe(1);
    s.ranTransaction(1, 5, 0); // 5 ms per task
    expect(s.transactionClaim()).toBe(10);
    for (let i = 0; i < 30; i++) s.ranTransaction(100, 1, 0); // 0.01 ms per task
    expect(s.transactionClaim()).toBe(500);
  });

  it('never claims more than the last transaction could run when it hit a limit', () => {
    const { s } = sizer(500, 10);
    s.ranTransaction(48, 1, 452); // savepoint limit: 48 ran, 452 waited for another transaction
    expect(s.transactionClaim()).toBe(48);
    s.ranTransaction(48, 1, 0);
    expect(s.transactionClaim()).toBe(500);
  });
});

describe('ClaimSizer, the next claim of a queue', () => {
  const PLAIN: ClaimRules = { limited: false, holdsSlots: false };
  const SLOTS: ClaimRules = { limited: true, holdsSlots: true };
  const AGING: ClaimRules = { limited: true, holdsSlots: false };

  it('a flow-controlled lease queue claims only for its free slots: a claimed task holds a slot of its rule', () => {
    const { s, complete } = sizer(500, 10);
    complete(1000, 10); // a fast pace: a plain queue would claim ahead
    expect(s.nextClaim('lease', PLAIN, 10, 0).want).toBeGreaterThan(0);
    expect(s.nextClaim('lease', SLOTS, 10, 0)).toEqual({ want: 0, perTransaction: Infinity });
    expect(s.nextClaim('lease', SLOTS, 4, 2)).toEqual({ want: 4, perTransaction: Infinity });
    // Priority aging alone: limited, but a claimed task holds nothing: ahead, as a plain queue.
    expect(s.nextClaim('lease', AGING, 10, 0)).toEqual(s.nextClaim('lease', PLAIN, 10, 0));
  });

  it('transactional: one batch at a time, or for a flow-controlled queue a batch for every free transaction', () => {
    const { s } = sizer(500, 4);
    s.ranTransaction(1, 25, 0); // 25 ms per task: 2 per transaction
    expect(s.nextClaim('transactional', PLAIN, 1, 0)).toEqual({ want: 2, perTransaction: Infinity });
    expect(s.nextClaim('transactional', SLOTS, 1, 0)).toEqual({ want: 6, perTransaction: 2 });
    expect(s.nextClaim('transactional', AGING, 1, 0)).toEqual({ want: 6, perTransaction: 2 });
    expect(s.nextClaim('transactional', SLOTS, 4, 0).want).toBe(0);
    expect(s.nextClaim('transactional', PLAIN, 4, 0).want).toBe(0);
  });
});
