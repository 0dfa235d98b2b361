import { WakeTimers } from './wake.timers';

const DAY = 86_400_000;

describe('WakeTimers due wake-ups', () => {
  let wakes: number;
  let timers: WakeTimers;
  beforeEach(() => {
    jest.useFakeTimers();
    wakes = 0;
    timers = new WakeTimers(() => wakes++, () => 60_000);
  });
  afterEach(() => {
    timers.stop();
    jest.useRealTimers();
  });

  it('waits out a delay of months (past setTimeout\'s 24.8 days) and wakes once, on time', () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on('warning', onWarning);
    try {
      timers.dueIn(90 * DAY);
      jest.advanceTimersByTime(90 * DAY - 1000);
      expect(wakes).toBe(0);
      jest.advanceTimersByTime(1000 + 10);
      expect(wakes).toBe(1);
      expect(warnings).not.toContain('TimeoutOverflowWarning');
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('keeps the earliest due time; a later one is set again by the claim that follows', () => {
    timers.dueIn(500);
    timers.dueIn(1500); // earlier one stands
    jest.advanceTimersByTime(510);
    expect(wakes).toBe(1);
    timers.dueIn(990); // what the claim after the first wake-up reports
    jest.advanceTimersByTime(1000);
    expect(wakes).toBe(2);
  });

  it('an earlier due time replaces a later one', () => {
    timers.dueIn(5000);
    timers.dueIn(100);
    jest.advanceTimersByTime(110);
    expect(wakes).toBe(1);
    jest.advanceTimersByTime(10_000);
    expect(wakes).toBe(1);
  });
});
