import { statsByQueue } from './task-info';

describe('statsByQueue', () => {
  it("shows a queue's cooldown and its partitions' under the new names and, for one release, the deprecated ones", () => {
    const until = new Date('2030-01-01T00:00:00Z');
    const [s] = statsByQueue([], [], [
      { scope: 'queue', name: 'q', partition: null, until, reason: null },
      { scope: 'partition', name: 'q', partition: 'p', until, reason: null },
      { scope: 'limiter', name: 'lim', partition: null, until, reason: null },
    ]);
    expect(s).toMatchObject({ queue: 'q', cooldownUntil: until, cooldownPartitions: [{ partition: 'p', until }] });
    expect({ until: s.backedOffUntil, partitions: s.backedOffPartitions }).toEqual({ until: s.cooldownUntil, partitions: s.cooldownPartitions });
  });
});
