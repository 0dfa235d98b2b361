import type { Attempt } from './attempt';
import { ClaimHold } from './claim.hold';

describe('ClaimHold: attempts set aside by a back-off of the whole queue', () => {
  let given: string[][];
  let releases: number;
  let hold: ClaimHold;
  /** Give-backs not yet answered, resolved by the test. */
  let pending: (() => void)[];
  const attempt = (id: string) => ({ task: { id } }) as unknown as Attempt;
  beforeEach(() => {
    jest.useFakeTimers();
    given = [];
    releases = 0;
    pending = [];
    hold = new ClaimHold(
      () => releases++,
      (attempts) => {
        given.push(attempts.map((a) => a.task.id));
        return new Promise((resolve) => pending.push(resolve));
      },
    );
  });
  afterEach(() => jest.useRealTimers());

  it('go back once the back-off is written, not before; a claim sent before it answers into the same set', () => {
    const mark = hold.mark;
    const written = hold.hold(10_000);
    hold.setAside([attempt('a'), attempt('b')]);
    expect(hold.metSince(mark)).toBe(true);
    hold.setAside([attempt('c')]);
    expect(given).toEqual([]);
    written();
    expect({ given, releases, heldForMs: hold.heldForMs }).toEqual({ given: [['a', 'b', 'c']], releases: 1, heldForMs: 0 });
    written(); // twice: nothing more
    expect(given).toHaveLength(1);
  });

  it("go back at the back-off's end when its row is still not written (a held row, an unreachable database)", () => {
    hold.hold(1_000);
    hold.setAside([attempt('a')]);
    jest.advanceTimersByTime(999);
    expect(given).toEqual([]);
    jest.advanceTimersByTime(1);
    expect(given).toEqual([['a']]);
  });

  it("wait for a later, longer back-off's end", () => {
    hold.hold(1_000);
    hold.setAside([attempt('a')]);
    jest.advanceTimersByTime(500);
    hold.hold(2_000);
    jest.advanceTimersByTime(600);
    expect(given).toEqual([]);
    jest.advanceTimersByTime(2_000);
    expect(given).toEqual([['a']]);
  });

  it('go back at once with no back-off being written; a cancelled one at once, the others kept', () => {
    hold.setAside([attempt('a')]);
    expect(given).toEqual([['a']]);
    hold.hold(10_000);
    const b = attempt('b');
    hold.setAside([b, attempt('c')]);
    expect(hold.giveBackNow(b)).toBe(true);
    expect(hold.giveBackNow(b)).toBe(false);
    expect(given).toEqual([['a'], ['b']]);
  });

  it('keep the worker from idle until given back, and giveBackAll (stop) waits for give-backs under way', async () => {
    hold.hold(10_000);
    hold.setAside([attempt('a')]);
    expect(hold.holding).toBe(true);
    let done = false;
    const stopped = hold.giveBackAll().then(() => (done = true));
    await Promise.resolve();
    expect({ given, done, holding: hold.holding }).toEqual({ given: [['a']], done: false, holding: true });
    for (const resolve of pending) resolve();
    await stopped;
    expect({ done, holding: hold.holding }).toEqual({ done: true, holding: false });
  });

  it('say nothing of claims sent after the back-off, or once it ended', () => {
    hold.hold(1_000);
    expect(hold.metSince(hold.mark)).toBe(false);
    const mark = hold.mark;
    hold.hold(1_000);
    jest.advanceTimersByTime(1_000);
    expect(hold.metSince(mark)).toBe(false);
  });
});
