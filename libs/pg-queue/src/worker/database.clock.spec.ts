import { DatabaseClock } from './database.clock';

describe('DatabaseClock', () => {
  it('reads database due times on the local clock, whichever way the clocks are off', () => {
    const clock = new DatabaseClock();
    const now = Date.now();
    // The database is 2 s ahead; a claim sent at now-2 answered at now read now+1999 there.
    clock.observe(now + 1999, now - 2, now);
    expect(clock.msUntil(now + 2000 + 800)).toBeGreaterThan(790);
    expect(clock.msUntil(now + 2000 + 800)).toBeLessThan(810);
  });

  it('follows a stepped clock at the next quick claim, and ignores a slow one', () => {
    const clock = new DatabaseClock();
    const now = Date.now();
    clock.observe(now - 1, now - 2, now); // in step
    clock.observe(now + 5000, now - 500, now); // a 500 ms round trip: not trusted
    expect(Math.round(clock.msUntil(now + 100) / 10)).toBe(10);
    clock.observe(now + 2999, now - 2, now); // the database is now 3 s ahead
    expect(Math.round(clock.msUntil(now + 3100) / 10)).toBe(10);
  });
});
