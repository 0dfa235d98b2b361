import { InvalidEnqueueOptionsError } from '../errors';
import type { NewTaskRow } from './task-row';

/**
 * The order in which one enqueue call inserts its rows that have `dependsOn`: a row after every
 * row of the same call it names with `{ item: i }` (rows without dependsOn are inserted before
 * all of these). Throws, before anything is written, for a reference out of range or a cycle.
 */
export function dependantOrder(rows: readonly NewTaskRow[]): number[] {
  const order: number[] = [];
  const state = new Map<number, 'visiting' | 'done'>();
  const visit = (index: number, path: number[]): void => {
    const seen = state.get(index);
    if (seen === 'done') return;
    if (seen === 'visiting') {
      throw new InvalidEnqueueOptionsError('dependsOn', `items ${[...path.slice(path.indexOf(index)), index].join(' → ')} form a cycle`);
    }
    state.set(index, 'visiting');
    for (const ref of rows[index].dependsOn ?? []) {
      if (!('item' in ref)) continue;
      if (ref.item >= rows.length) {
        throw new InvalidEnqueueOptionsError('dependsOn', `item ${index} names item ${ref.item}, but the call has ${rows.length} item(s)`);
      }
      if (rows[ref.item].dependsOn !== null) visit(ref.item, [...path, index]);
    }
    state.set(index, 'done');
    order.push(index);
  };
  rows.forEach((row, index) => {
    if (row.dependsOn !== null) visit(index, []);
  });
  return order;
}
