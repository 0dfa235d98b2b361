import { InvalidEnqueueOptionsError } from '../errors';
import type { DependsOnRef, NewTaskRow } from './task-row';
import { dependantOrder } from './dependency-order';

const row = (dependsOn: DependsOnRef[] | null) => ({ dependsOn }) as NewTaskRow;

describe('dependantOrder', () => {
  it('puts each dependant after the dependants it names, and leaves plain rows out', () => {
    expect(dependantOrder([row([{ item: 2 }]), row(null), row([{ item: 1 }, { id: '7' }]), row([{ item: 0 }])])).toEqual([2, 0, 3]);
  });

  it('refuses a cycle, a self-reference and an item out of range', () => {
    expect(() => dependantOrder([row([{ item: 1 }]), row([{ item: 0 }])])).toThrow(/0 → 1 → 0 form a cycle/);
    expect(() => dependantOrder([row([{ item: 0 }])])).toThrow(InvalidEnqueueOptionsError);
    expect(() => dependantOrder([row([{ item: 3 }])])).toThrow(/names item 3, but the call has 1/);
  });
});
