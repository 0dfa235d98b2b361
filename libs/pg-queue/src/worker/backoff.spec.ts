import type { BackoffOptions } from '../types';
import { backoffDelayMs } from './backoff';

/** A random source that must not be consulted. */
const noRandom = () => {
  throw new Error('random() called without jitter');
};

describe('backoffDelayMs', () => {
  describe('without jitter', () => {
    it.each([
      // [type, delayMs, attempt, expected]
      ['fixed', 1000, 1, 1000],
      ['fixed', 1000, 2, 1000],
      ['fixed', 1000, 10, 1000],
      ['linear', 1000, 1, 1000],
      ['linear', 1000, 2, 2000],
      ['linear', 1000, 7, 7000],
      ['exponential', 1000, 1, 1000],
      ['exponential', 1000, 2, 2000],
      ['exponential', 1000, 3, 4000],
      ['exponential', 1000, 10, 512_000],
      ['exponential', 250, 4, 2000],
    ] as const)('%s with delayMs %d at attempt %d waits %d ms', (type, delayMs, attempt, expected) => {
      expect(backoffDelayMs({ type, delayMs }, attempt, noRandom)).toBe(expected);
    });

    it.each(['fixed', 'linear', 'exponential'] as const)('%s treats attempt 0 and negative attempts as the first', (type) => {
      const b: BackoffOptions = { type, delayMs: 300 };
      expect(backoffDelayMs(b, 0, noRandom)).toBe(300);
      expect(backoffDelayMs(b, -5, noRandom)).toBe(300);
    });

    it('a delay of 0 stays 0 for every type and attempt', () => {
      for (const type of ['fixed', 'linear', 'exponential'] as const) {
        for (const attempt of [1, 2, 50, 1_000_000]) expect(backoffDelayMs({ type, delayMs: 0 }, attempt, noRandom)).toBe(0);
      }
    });

    it('returns whole milliseconds', () => {
      expect(backoffDelayMs({ type: 'linear', delayMs: 0.4 }, 3, noRandom)).toBe(1);
      expect(backoffDelayMs({ type: 'fixed', delayMs: 2.5 }, 1, noRandom)).toBe(3);
      expect(Number.isInteger(backoffDelayMs({ type: 'exponential', delayMs: 1.1 }, 5, noRandom))).toBe(true);
    });
  });

  describe('maxDelayMs cap', () => {
    it.each([
      ['fixed', 5000, 3000, 1, 3000],
      ['linear', 1000, 3500, 3, 3000],
      ['linear', 1000, 3500, 4, 3500],
      ['linear', 1000, 3500, 100, 3500],
      ['exponential', 1000, 10_000, 4, 8000],
      ['exponential', 1000, 10_000, 5, 10_000],
      ['exponential', 1000, 10_000, 60, 10_000],
    ] as const)('%s delayMs %d capped at %d, attempt %d → %d', (type, delayMs, maxDelayMs, attempt, expected) => {
      expect(backoffDelayMs({ type, delayMs, maxDelayMs }, attempt, noRandom)).toBe(expected);
    });

    it('a cap equal to the delay is exact', () => {
      expect(backoffDelayMs({ type: 'exponential', delayMs: 700, maxDelayMs: 700 }, 9, noRandom)).toBe(700);
    });

    it('the library defaults (exponential 1 s, cap 1 h) reach the cap and stay there', () => {
      const b: BackoffOptions = { type: 'exponential', delayMs: 1000, maxDelayMs: 3_600_000 };
      expect(backoffDelayMs(b, 12, noRandom)).toBe(2_048_000);
      expect(backoffDelayMs(b, 13, noRandom)).toBe(3_600_000);
      expect(backoffDelayMs(b, 1_000_000, noRandom)).toBe(3_600_000);
    });
  });

  describe('jitter', () => {
    it('maps random() = 0 to half the delay and random() → 1 to the full delay', () => {
      const b: BackoffOptions = { type: 'fixed', delayMs: 1000, jitter: true };
      expect(backoffDelayMs(b, 1, () => 0)).toBe(500);
      expect(backoffDelayMs(b, 1, () => 0.5)).toBe(750);
      expect(backoffDelayMs(b, 1, () => 0.999_999_999)).toBe(1000);
    });

    it('stays within [delay/2, delay] for every random value, for every type', () => {
      const randoms = [0, 1e-12, 0.1, 0.25, 1 / 3, 0.5, 0.75, 0.9, 0.999_999, 1 - Number.EPSILON];
      for (const type of ['fixed', 'linear', 'exponential'] as const) {
        for (const attempt of [1, 2, 3, 8]) {
          const full = backoffDelayMs({ type, delayMs: 999 }, attempt, noRandom);
          for (const r of randoms) {
            const d = backoffDelayMs({ type, delayMs: 999, jitter: true }, attempt, () => r);
            expect(d).toBeGreaterThanOrEqual(Math.floor(full / 2));
            expect(d).toBeLessThanOrEqual(full);
            expect(Number.isInteger(d)).toBe(true);
          }
        }
      }
    });

    it('applies after the cap: a jittered delay never exceeds maxDelayMs', () => {
      const b: BackoffOptions = { type: 'exponential', delayMs: 1000, maxDelayMs: 5000, jitter: true };
      expect(backoffDelayMs(b, 20, () => 0)).toBe(2500);
      expect(backoffDelayMs(b, 20, () => 0.999_999_999)).toBe(5000);
      for (let i = 0; i < 200; i++) {
        const d = backoffDelayMs(b, 20, Math.random);
        expect(d).toBeGreaterThanOrEqual(2500);
        expect(d).toBeLessThanOrEqual(5000);
      }
    });

    it('calls random() exactly once per delay with jitter, and never without it', () => {
      const random = jest.fn(() => 0.5);
      backoffDelayMs({ type: 'linear', delayMs: 100, jitter: true }, 3, random);
      expect(random).toHaveBeenCalledTimes(1);
      random.mockClear();
      backoffDelayMs({ type: 'linear', delayMs: 100, jitter: false }, 3, random);
      backoffDelayMs({ type: 'linear', delayMs: 100 }, 3, random);
      expect(random).not.toHaveBeenCalled();
    });

    it('uses Math.random when no random function is given', () => {
      const spy = jest.spyOn(Math, 'random').mockReturnValue(0);
      try {
        expect(backoffDelayMs({ type: 'fixed', delayMs: 800, jitter: true }, 1)).toBe(400);
        expect(spy).toHaveBeenCalledTimes(1);
      } finally {
        spy.mockRestore();
      }
    });
  });

  describe('large attempt numbers', () => {
    const attempts = [53, 54, 100, 1024, 1025, 1_000_000, 2 ** 31, Number.MAX_SAFE_INTEGER];

    it.each(attempts)('exponential without a cap stays finite at attempt %d', (attempt) => {
      const d = backoffDelayMs({ type: 'exponential', delayMs: 1000 }, attempt, noRandom);
      expect(Number.isFinite(d)).toBe(true);
      expect(d).toBeGreaterThan(0);
      // the exponent is capped: it does not keep growing past 2^52
      expect(d).toBe(1000 * 2 ** 52);
    });

    it.each(attempts)('exponential with jitter stays finite at attempt %d', (attempt) => {
      const d = backoffDelayMs({ type: 'exponential', delayMs: 1000, jitter: true }, attempt, () => 0.5);
      expect(Number.isFinite(d)).toBe(true);
      expect(Number.isNaN(d)).toBe(false);
    });

    it.each(attempts)('exponential with a cap returns the cap at attempt %d', (attempt) => {
      expect(backoffDelayMs({ type: 'exponential', delayMs: 1000, maxDelayMs: 60_000 }, attempt, noRandom)).toBe(60_000);
      const jittered = backoffDelayMs({ type: 'exponential', delayMs: 1000, maxDelayMs: 60_000, jitter: true }, attempt, () => 0.5);
      expect(jittered).toBe(45_000);
    });

    it.each(attempts)('linear stays finite at attempt %d, and the cap holds', (attempt) => {
      const d = backoffDelayMs({ type: 'linear', delayMs: 1000 }, attempt, noRandom);
      expect(Number.isFinite(d)).toBe(true);
      expect(d).toBe(Math.round(1000 * attempt));
      expect(backoffDelayMs({ type: 'linear', delayMs: 1000, maxDelayMs: 30_000 }, attempt, noRandom)).toBe(30_000);
    });

    it.each(attempts)('fixed ignores the attempt number (%d)', (attempt) => {
      expect(backoffDelayMs({ type: 'fixed', delayMs: 1234 }, attempt, noRandom)).toBe(1234);
    });
  });
});
