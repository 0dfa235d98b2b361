import { JournalLoader } from './journal.loader';
import type { JournalRow } from '../sql/workflow.repository';

const entry = (seq: number): JournalRow => ({ seq, kind: 'step', name: `s${seq}`, outcome: 'ok', result: { v: seq } });

describe('JournalLoader', () => {
  it('reads the journals asked for in one turn of the event loop with one load, each its own', async () => {
    const loads: string[][] = [];
    const loader = new JournalLoader(async (ids) => {
      loads.push(ids);
      return new Map([['1', [entry(0), entry(1)]], ['3', [entry(0)]]]);
    });
    const [one, two, three, again] = await Promise.all([loader.journal('1'), loader.journal('2'), loader.journal('3'), loader.journal('1')]);
    expect(loads).toEqual([['1', '2', '3']]);
    expect(one).toEqual([entry(0), entry(1)]);
    expect(two).toEqual([]); // no entries yet
    expect(three).toEqual([entry(0)]);
    expect(again).toEqual(one);
    await loader.journal('4'); // a later turn: a load of its own
    expect(loads).toEqual([['1', '2', '3'], ['4']]);
  });

  it('rejects every read of a batch whose load failed, and loads again after', async () => {
    let fail = true;
    const loader = new JournalLoader(async () => {
      if (fail) throw new Error('connection lost');
      return new Map();
    });
    const results = await Promise.allSettled([loader.journal('1'), loader.journal('2')]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    fail = false;
    await expect(loader.journal('1')).resolves.toEqual([]);
  });
});
