import { DatabaseClock } from './database.clock';

describe('DatabaseClock', () => {
  // The local clock stands still: msUntil reads it again, and under load (a parallel run) more than
  // the assertions' few ms passed between the spec's reading and the clock's.
  const now = Date.now();
  beforeEach(() => jest.spyOn(Date, 'now').mockReturnValue(now));
  afterEach(() => jest.restoreAllMocks());

  it('reads database due times on the local clock, whichever way the clocks are off', () => {
    const clock = new DatabaseClock();
    // The database is 2 s ahead; a claim sent at now-2 answered at now read now+1999 there.
    clock.observe(now + 1999, now - 2, now);
    expect(clock.msUntil(now + 2000 + 800)).toBe(800);
  });

  it('follows a stepped clock at the next quick claim; a slow one changes it only as far as it must', () => {
    const clock = new DatabaseClock();
    clock.observe(now - 1, now - 2, now); // in step
    clock.observe(now - 300, now - 500, now); // a 500 ms round trip that agrees: not trusted
    expect(clock.msUntil(now + 100)).toBe(100);
    clock.observe(now + 2999, now - 2, now); // the database is now 3 s ahead
    expect(clock.msUntil(now + 3100)).toBe(100);
  });

  it('moves into the bounds a slow answer proves when the clock was stepped and no quick claim came', () => {
    const clock = new DatabaseClock();
    clock.observe(now - 2001, now - 2, now); // the database is 2 s behind
    // The local clock is stepped back 4 s: the database is now 2 s ahead. The only claim since took
    // 50 ms, so the database read its clock while the local one read between now-50 and now.
    clock.observe(now + 1980, now - 50, now);
    // The offset is between 1980 and 2030 ms; the old estimate (-2001) would wake 4 s late.
    expect(Math.abs(clock.msUntil(now + 2000 + 800) - 800)).toBeLessThanOrEqual(50);
  });
});
