import { ReplayCursor, type JournalEntry } from './journal';
import { WorkflowDefinitionError, WorkflowReplayError } from './workflow.errors';

const entry = (seq: number, kind: JournalEntry['kind'], name: string): JournalEntry => ({ seq, kind, name, outcome: 'ok', result: { v: seq } });

describe('ReplayCursor', () => {
  it('numbers calls in call order and hands back what the journal has at each position', () => {
    const c = new ReplayCursor('7', [entry(0, 'step', 'a'), entry(1, 'sleep', 'sleep')]);
    expect(c.call('step', 'a')).toEqual({ seq: 0, entry: entry(0, 'step', 'a') });
    expect(c.call('sleep', 'sleep').entry).toEqual(entry(1, 'sleep', 'sleep'));
    expect(c.call('step', 'b')).toEqual({ seq: 2, entry: null });
    c.assertConsumed();
  });

  it('names both sides of a mismatch: the journal has another kind of call under that name', () => {
    const c = new ReplayCursor('7', [entry(0, 'transaction', 'reserve')]);
    expect(() => c.call('step', 'reserve')).toThrow(new WorkflowReplayError('7', 1, 'transaction "reserve"', 'called step "reserve"'));
  });

  it('a call of a new name runs as new; the entry no call replayed fails the run when it returns or parks', () => {
    const d = new ReplayCursor('7', [entry(0, 'step', 'a')]);
    expect(d.call('step', 'b')).toEqual({ seq: 1, entry: null });
    expect(() => d.assertConsumed()).toThrow(/at call 1 the journal has step "a", the code returned without making that call/);
  });

  it('refuses a repeated step name, but not repeated sleeps, signals or enqueues', () => {
    const c = new ReplayCursor('7', []);
    c.call('step', 'a');
    expect(() => c.call('transaction', 'a')).toThrow(/named "a" twice/);
    c.call('sleep', 'sleep');
    c.call('sleep', 'sleep');
    c.call('signal', 'go');
    c.call('signal', 'go');
    c.call('enqueue', 'mail');
    expect(() => c.call('enqueue', 'mail')).not.toThrow();
  });

  it('refuses a name the journal cannot store (U+0000, a lone surrogate, empty, over 512 characters)', () => {
    const c = new ReplayCursor('7', []);
    for (const name of ['a\u0000b', 'a\uD800', '', 'x'.repeat(513)]) expect(() => c.call('step', name)).toThrow(WorkflowDefinitionError);
    expect(() => c.call('step', 'x'.repeat(512))).not.toThrow();
  });

  it('fails a run that returns before the journal ends (a call was removed)', () => {
    const c = new ReplayCursor('7', [entry(0, 'step', 'a'), entry(1, 'step', 'b')]);
    c.call('step', 'a');
    expect(() => c.assertConsumed()).toThrow(/at call 2 the journal has step "b", the code returned/);
  });

  it('patched: a marker at the position is true and consumed; another call there is false and left; past the end it is marked', () => {
    const withMarker = new ReplayCursor('7', [{ ...entry(0, 'patch', 'v2') }, entry(1, 'step', 'new')]);
    expect(withMarker.patched('v2')).toEqual({ value: true, mark: null });
    expect(withMarker.call('step', 'new').seq).toBe(1);

    const old = new ReplayCursor('7', [entry(0, 'step', 'old')]);
    expect(old.patched('v2')).toEqual({ value: false, mark: null });
    expect(old.call('step', 'old').seq).toBe(0);
    expect(old.patched('v2')).toEqual({ value: false, mark: null }); // kept for the run

    const fresh = new ReplayCursor('7', [entry(0, 'step', 'a')]);
    fresh.call('step', 'a');
    expect(fresh.patched('v2')).toEqual({ value: true, mark: 1 });
    expect(fresh.patched('v2')).toEqual({ value: true, mark: null });
    expect(fresh.call('step', 'b').seq).toBe(2);
  });

  it('matches named calls started together (Promise.all) by name, whatever order they ended in the first time', () => {
    // The first run: a and b started together, b ended first, and each branch then made a second call.
    const c = new ReplayCursor('7', [entry(0, 'step', 'a'), entry(1, 'step', 'b'), entry(2, 'step', 'b2'), entry(3, 'step', 'a2')]);
    const [a, b] = [c.call('step', 'a'), c.call('step', 'b')];
    expect([a.seq, b.seq]).toEqual([0, 1]);
    // The replay: both return at once, so a's branch makes its second call first.
    expect(c.call('step', 'a2').entry).toEqual(entry(3, 'step', 'a2'));
    expect(c.call('step', 'b2').entry).toEqual(entry(2, 'step', 'b2'));
    expect(c.call('step', 'c')).toEqual({ seq: 4, entry: null });
    c.assertConsumed();
  });

  it('matches sleeps, signal waits and enqueues by their order among calls of the same kind and name', () => {
    const c = new ReplayCursor('7', [entry(0, 'signal', 'paid'), entry(1, 'sleep', 'sleep'), entry(2, 'enqueue', 'mail'), entry(3, 'signal', 'paid'), entry(4, 'signal', 'shipped')]);
    expect(c.call('signal', 'shipped').seq).toBe(4);
    expect(c.call('enqueue', 'mail').seq).toBe(2);
    expect(c.call('signal', 'paid').seq).toBe(0);
    expect(c.call('signal', 'paid').seq).toBe(3);
    expect(c.call('signal', 'paid')).toEqual({ seq: 5, entry: null });
    expect(c.call('sleep', 'sleep').seq).toBe(1);
    c.assertConsumed();
  });

  it('patched checks its id as a call name, and leaves a marker no call asks for alone', () => {
    expect(() => new ReplayCursor('7', []).patched('')).toThrow(WorkflowDefinitionError);
    expect(() => new ReplayCursor('7', []).patched('a\u0000')).toThrow(WorkflowDefinitionError);
    const c = new ReplayCursor('7', [entry(0, 'patch', 'gone'), entry(1, 'step', 'a')]);
    c.call('step', 'a');
    c.assertConsumed();
  });
});
