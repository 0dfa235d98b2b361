import { nextCursor } from './limits.repository';

describe('nextCursor: where the next round of a partitioned claim starts', () => {
  it('after the partition served last in key order, from after the previous cursor', () => {
    expect(nextCursor(null, ['b', 'a', 'c'])).toBe('c');
    expect(nextCursor('b', ['c', 'd'])).toBe('d');
  });

  it('after a wrap-around, the last partition served before the previous cursor', () => {
    // the round went d, e (after 'c'), then a, b (wrapped): b was served last
    expect(nextCursor('c', ['d', 'e', 'a', 'b'])).toBe('b');
    expect(nextCursor('c', ['c'])).toBe('c');
  });

  it('tasks without a partition end the round: the next starts from the first key', () => {
    expect(nextCursor('b', ['c', null])).toBeNull();
  });
});
