import { PeriodicPass } from './periodic.pass';

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('PeriodicPass', () => {
  it('runs one pass at a time, about an interval apart, and sooner when a pass asks', async () => {
    const starts: number[] = [];
    let running = 0;
    let overlap = false;
    const loop = new PeriodicPass(async () => {
      starts.push(Date.now());
      overlap ||= ++running > 1;
      await pause(30);
      running--;
      return starts.length === 2 ? 0 : null; // after the second pass, the third at once
    }, () => 300);
    await Promise.all([loop.now(), loop.now()]); // the second call joins the first
    expect(starts).toHaveLength(1);
    await pause(700);
    await loop.stop();
    expect(overlap).toBe(false);
    // First at 0, ends at 30; second 240-360 ms after that (late only by a busy event loop); third
    // at once after the second ended.
    expect(starts.length).toBeGreaterThanOrEqual(3);
    const gap1 = starts[1] - starts[0] - 30;
    const gap2 = starts[2] - starts[1] - 30;
    expect(gap1).toBeGreaterThanOrEqual(235);
    expect(gap1).toBeLessThan(1000);
    expect(gap2).toBeLessThan(150);
  });

  it('stop() waits for the pass under way and starts none after it', async () => {
    let ended = false;
    let passes = 0;
    const loop = new PeriodicPass(async () => {
      passes++;
      await pause(50);
      ended = true;
      return 0;
    }, () => 10);
    void loop.now();
    await pause(5);
    await loop.stop();
    expect(ended).toBe(true);
    await pause(60);
    expect(passes).toBe(1);
    expect(loop.isStopped).toBe(true);
  });

  it('a pass that throws rejects its caller, or is told to onError when a timer started it, and the schedule goes on', async () => {
    let passes = 0;
    const told: string[] = [];
    const loop = new PeriodicPass(async () => {
      passes++;
      if (passes <= 2) throw new Error(`boom ${passes}`);
    }, () => 20, 0, (err) => told.push((err as Error).message));
    await expect(loop.now()).rejects.toThrow('boom 1');
    await pause(70);
    await loop.stop();
    expect(passes).toBeGreaterThanOrEqual(3);
    expect(told).toEqual(['boom 2']);
    const before = passes;
    await loop.now(); // after stop(): nothing
    await pause(40);
    expect(passes).toBe(before);
  });
});
