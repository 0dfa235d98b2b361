import {
  InvalidEnqueueOptionsError,
  InvalidPayloadError,
  InvalidQueueNameError,
  PayloadTooLargeError,
} from '../errors';
import type { EnqueueOptions } from '../types';
import { buildTaskRow, serialisePayload, validateQueueName } from './task-input';

const DEFAULTS = { maxPayloadBytes: 1024 };
type Options = Omit<EnqueueOptions, 'tx'>;

/** The error thrown by `fn`, or a failure when it does not throw. */
function thrown(fn: () => unknown): Error {
  try {
    fn();
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a throw, but the call returned');
}

const cyclic = () => {
  const o: Record<string, unknown> = { a: 1 };
  o.self = o;
  return o;
};

describe('validateQueueName', () => {
  it.each(['a', 'email.send', 'orders:confirm', 'A-Z_0-9', 'x'.repeat(128), '...', '-'])('accepts %p', (name) => {
    expect(validateQueueName(name)).toBe(name);
  });

  it.each([
    ['the empty string', ''],
    ['a space', 'a b'],
    ['129 characters', 'x'.repeat(129)],
    ['a slash', 'a/b'],
    ['a quote', "a'b"],
    ['a NUL', 'a\u0000b'],
    ['a trailing newline', 'queue\n'],
    ['a non-ASCII letter', 'očередь'],
    ['a number', 42],
    ['null', null],
    ['undefined', undefined],
    ['an object', { toString: () => 'q' }],
    ['an array', ['q']],
  ])('rejects %s with InvalidQueueNameError', (_label, name) => {
    const err = thrown(() => validateQueueName(name));
    expect(err).toBeInstanceOf(InvalidQueueNameError);
    expect((err as InvalidQueueNameError).queue).toBe(name);
    expect(err.message).toMatch(/^pg-queue: invalid queue name /);
  });
});

describe('serialisePayload', () => {
  it.each([
    ['an object', { a: 1, b: 'two', c: [true, null] }, '{"a":1,"b":"two","c":[true,null]}'],
    ['null', null, 'null'],
    ['a number', 0, '0'],
    ['a string', 'hi', '"hi"'],
    ['an empty array', [], '[]'],
    ['a Date (as its ISO string)', new Date('2024-01-02T03:04:05.000Z'), '"2024-01-02T03:04:05.000Z"'],
    ['non-ASCII and emoji', { s: 'ж€😀' }, '{"s":"ж€😀"}'],
    ['negative zero', -0, '0'],
    ['a toJSON result', { toJSON: () => ({ v: 1 }) }, '{"v":1}'],
  ])('serialises %s', (_label, payload, json) => {
    expect(serialisePayload('q', payload, 1024)).toBe(json);
  });

  it.each([
    ['a function at the top', () => 1, /contains a function/],
    ['a function in a property', { run() {} }, /contains a function/],
    ['a function in an array', [1, () => 2], /contains a function/],
    ['a symbol at the top', Symbol('s'), /contains a symbol/],
    ['a symbol in a property', { s: Symbol('s') }, /contains a symbol/],
    ['a BigInt', { n: 10n }, /BigInt/i],
    ['a BigInt at the top', 10n, /BigInt/i],
    ['a cyclic object', cyclic(), /circular/i],
    ['a cycle through an array', (() => { const a: unknown[] = []; a.push({ a }); return a; })(), /circular/i],
    ['NaN', { x: NaN }, /contains the number NaN/],
    ['Infinity', { x: Infinity }, /contains the number Infinity/],
    ['-Infinity at the top', -Infinity, /contains the number -Infinity/],
    ['undefined at the top', undefined, /payload is undefined/],
    ['a NUL in a string value', { s: 'a\u0000b' }, /U\+0000/],
    ['a NUL in a key', { ['k\u0000']: 1 }, /U\+0000/],
    ['a NUL as the whole payload', '\u0000', /U\+0000/],
    ['a throwing toJSON', { toJSON() { throw new Error('no json for you'); } }, /no json for you/],
  ])('rejects %s with InvalidPayloadError', (_label, payload, reason) => {
    const err = thrown(() => serialisePayload('my.q', payload, 1024));
    expect(err).toBeInstanceOf(InvalidPayloadError);
    expect((err as InvalidPayloadError).queue).toBe('my.q');
    expect(err.message).toMatch(/^pg-queue: payload for "my\.q" is not JSON-serialisable: /);
    expect(err.message).toMatch(reason);
  });

  it('accepts a payload of exactly maxPayloadBytes, and rejects one byte more with bytes and limit', () => {
    const at = { s: 'x'.repeat(100 - '{"s":""}'.length) };
    expect(Buffer.byteLength(serialisePayload('q', at, 100))).toBe(100);
    const over = { s: 'x'.repeat(101 - '{"s":""}'.length) };
    const err = thrown(() => serialisePayload('big.q', over, 100));
    expect(err).toBeInstanceOf(PayloadTooLargeError);
    expect(err).toMatchObject({ queue: 'big.q', bytes: 101, limit: 100 });
    expect(err.message).toBe('pg-queue: payload for "big.q" is 101 bytes, over the 100-byte limit (maxPayloadBytes)');
  });

  it('measures the payload in UTF-8 bytes, not characters', () => {
    // 40 Cyrillic characters: 42 characters of JSON, 82 bytes
    const payload = 'ж'.repeat(40);
    expect(() => serialisePayload('q', payload, 82)).not.toThrow();
    const err = thrown(() => serialisePayload('q', payload, 81));
    expect(err).toBeInstanceOf(PayloadTooLargeError);
    expect(err).toMatchObject({ bytes: 82, limit: 81 });
  });

  it('reports the size of large payloads exactly', () => {
    const payload = { blob: 'a'.repeat(300 * 1024) };
    const err = thrown(() => serialisePayload('q', payload, 256 * 1024));
    expect(err).toBeInstanceOf(PayloadTooLargeError);
    expect((err as PayloadTooLargeError).bytes).toBe(JSON.stringify(payload).length);
    expect((err as PayloadTooLargeError).limit).toBe(256 * 1024);
  });

  it('checks serialisability before size: a huge payload with a function is an InvalidPayloadError', () => {
    expect(thrown(() => serialisePayload('q', { blob: 'a'.repeat(5000), f: () => 1 }, 100))).toBeInstanceOf(InvalidPayloadError);
  });

  // A literal backslash followed by "u0000" is ordinary text: JSON encodes it as "\\u0000", which
  // jsonb stores fine. Only a real U+0000 character is unstorable.
  it('accepts the six characters \\u0000 as text (only the real U+0000 character is unstorable)', () => {
    expect(serialisePayload('q', { path: 'C:\\u0000\\file' }, 1024)).toBe('{"path":"C:\\\\u0000\\\\file"}');
  });
});

describe('buildTaskRow', () => {
  // arguments.length, not default parameters: an explicit undefined payload or queue must reach buildTaskRow
  function build(options?: Options, ...rest: [payload?: unknown, queue?: unknown]) {
    const payload = rest.length >= 1 ? rest[0] : { ok: true };
    const queue = rest.length >= 2 ? rest[1] : 'q.ok';
    return buildTaskRow(queue, payload, options, DEFAULTS);
  }

  it('fills in the defaults', () => {
    expect(build()).toEqual({
      queue: 'q.ok',
      payloadJson: '{"ok":true}',
      priority: 0,
      runAt: null,
      delayMs: 0,
      maxAttempts: null,
      parentId: null,
      dedupKey: null,
      groupKey: null,
      onConflict: 'ignore',
      traceContext: null,
      partitionKey: null,
      tags: null,
      weight: null,
      debounce: null,
      dependsOn: null,
    });
  });

  it('takes up to 20 distinct tags, each a text key, and names the one it refuses', () => {
    expect(build({ tags: ['tenant:acme', 'vip'] }).tags).toEqual(['tenant:acme', 'vip']);
    expect(build({ tags: [] }).tags).toBeNull();
    expect(build({ tags: Array.from({ length: 20 }, (_, i) => `t${i}`) }).tags).toHaveLength(20);
    for (const [tags, argument] of [
      ['vip', 'tags'],
      [Array.from({ length: 21 }, (_, i) => `t${i}`), 'tags'],
      [['ok', ''], 'tags[1]'],
      [['ok', 7], 'tags[1]'],
      [['a\u0000b'], 'tags[0]'],
      [['x'.repeat(513)], 'tags[0]'],
      [['vip', 'vip'], 'tags[1]'],
    ] as const) {
      const err = thrown(() => build({ tags: tags as unknown as string[] }));
      expect({ tags, err: err instanceof InvalidEnqueueOptionsError, option: (err as InvalidEnqueueOptionsError).option }).toEqual({ tags, err: true, option: argument });
    }
  });

  it("takes a partition's weight from 1 to 1000, only with a partition and not in a follow-up", () => {
    expect(buildTaskRow('x.q', {}, { partition: 'a', weight: 3 }, DEFAULTS).weight).toBe(3);
    for (const [options, parentId] of [
      [{ weight: 3 }, null],
      [{ partition: 'a', weight: 0 }, null],
      [{ partition: 'a', weight: 1001 }, null],
      [{ partition: 'a', weight: 2.5 }, null],
      [{ partition: 'a', weight: 2 }, '7'],
    ] as const) {
      expect(() => buildTaskRow('x.q', {}, options, DEFAULTS, parentId)).toThrow(InvalidEnqueueOptionsError);
    }
  });

  it('leaves maxAttempts unset unless given: the handler that runs the task decides', () => {
    expect(buildTaskRow('x.q', {}, undefined, DEFAULTS).maxAttempts).toBeNull();
    expect(buildTaskRow('x.q', {}, { maxAttempts: 2 }, DEFAULTS).maxAttempts).toBe(2);
  });

  it('keeps valid options and rounds delayMs', () => {
    const runAt = new Date('2030-01-01T00:00:00Z');
    const row = buildTaskRow('q', 1, { priority: -5, runAt, delayMs: 10.6, maxAttempts: 1, key: 'k', group: 'g', onConflict: 'replace' }, DEFAULTS, '42');
    expect(row).toMatchObject({ priority: -5, runAt, delayMs: 11, maxAttempts: 1, dedupKey: 'k', groupKey: 'g', onConflict: 'replace', parentId: '42' });
  });

  it('accepts the int32 priority bounds used by the library', () => {
    expect(build({ priority: 2_147_483_647 }).priority).toBe(2_147_483_647);
    expect(build({ priority: -2_147_483_647 }).priority).toBe(-2_147_483_647);
  });

  it.each([
    ['an empty queue name', ''],
    ['a queue name with a space', 'a b'],
    ['a 129-character queue name', 'q'.repeat(129)],
    ['a numeric queue name', 1],
    ['an undefined queue name', undefined],
  ])('rejects %s with InvalidQueueNameError', (_label, queue) => {
    expect(thrown(() => build(undefined, {}, queue))).toBeInstanceOf(InvalidQueueNameError);
  });

  it.each([
    ['a function', () => 1],
    ['a symbol', Symbol('x')],
    ['a BigInt', 1n],
    ['a cyclic object', cyclic()],
    ['NaN', NaN],
    ['Infinity', { n: Infinity }],
    ['undefined', undefined],
    ['a NUL in a string', { s: '\u0000' }],
  ])('rejects a payload with %s with InvalidPayloadError', (_label, payload) => {
    const err = thrown(() => build(undefined, payload));
    expect(err).toBeInstanceOf(InvalidPayloadError);
    expect((err as InvalidPayloadError).queue).toBe('q.ok');
  });

  it('rejects a payload over maxPayloadBytes with PayloadTooLargeError carrying bytes and limit', () => {
    const err = thrown(() => buildTaskRow('q.big', 'x'.repeat(2000), undefined, DEFAULTS));
    expect(err).toBeInstanceOf(PayloadTooLargeError);
    expect(err).toMatchObject({ queue: 'q.big', bytes: 2002, limit: 1024 });
  });

  it.each([
    ['priority', 'a fraction', { priority: 1.5 }],
    ['priority', 'NaN', { priority: NaN }],
    ['priority', 'Infinity', { priority: Infinity }],
    ['priority', 'a string', { priority: '1' }],
    ['priority', 'int32 max + 1', { priority: 2_147_483_648 }],
    ['priority', 'far below int32', { priority: -3_000_000_000 }],
    ['runAt', 'an invalid Date', { runAt: new Date('nope') }],
    ['runAt', 'a string', { runAt: '2030-01-01T00:00:00Z' }],
    ['runAt', 'a timestamp number', { runAt: Date.now() }],
    ['runAt', 'null', { runAt: null }],
    ['delayMs', 'a negative number', { delayMs: -1 }],
    ['delayMs', 'NaN', { delayMs: NaN }],
    ['delayMs', 'Infinity', { delayMs: Infinity }],
    ['delayMs', 'a string', { delayMs: '100' }],
    ['maxAttempts', '0', { maxAttempts: 0 }],
    ['maxAttempts', 'a negative number', { maxAttempts: -1 }],
    ['maxAttempts', 'a fraction', { maxAttempts: 2.5 }],
    ['maxAttempts', 'over a million', { maxAttempts: 1_000_001 }],
    ['key', 'the empty string', { key: '' }],
    ['key', 'a number', { key: 5 }],
    ['key', '513 characters', { key: 'k'.repeat(513) }],
    ['key', 'a NUL', { key: 'a\u0000' }],
    ['group', 'the empty string', { group: '' }],
    ['group', 'a NUL', { group: '\u0000' }],
    ['onConflict', 'an unknown mode', { onConflict: 'x', key: 'k' }],
    ['onConflict', 'a mode without a key', { onConflict: 'replace' }],
    ['options', 'a string', 'fast'],
    // A burst's task is pushed back while the burst lasts: first of its group, it would hold the group.
    ['debounce', 'a group', { debounce: { key: 'k', delayMs: 10 }, group: 'g' }],
  ])('rejects %s given %s with InvalidEnqueueOptionsError naming it', (option, _label, options) => {
    const err = thrown(() => build(options as Options));
    expect(err).toBeInstanceOf(InvalidEnqueueOptionsError);
    expect((err as InvalidEnqueueOptionsError).option).toBe(option);
    expect(err.message).toContain(`invalid enqueue option "${option}"`);
  });

  it.each([
    [{ dealy: 1000 }, 'dealy', 'delayMs'],
    [{ priorty: 1 }, 'priorty', 'priority'],
    [{ debounce: { key: 'k', delayMs: 10, mod: 'leading' } }, 'debounce.mod', 'mode'],
    [{ frobnicate: 1 }, 'frobnicate', null],
  ])('an unknown option %j is an InvalidEnqueueOptionsError naming %s', (options, option, suggestion) => {
    const err = thrown(() => build(options as Options));
    expect(err).toBeInstanceOf(InvalidEnqueueOptionsError);
    expect((err as InvalidEnqueueOptionsError).option).toBe(option);
    const key = option.replace(/^.*\./, '');
    expect(err.message).toContain(`invalid enqueue option "${option}": unknown option "${key}"`);
    if (suggestion) expect(err.message).toContain(`— did you mean "${suggestion}"?`);
    else expect(err.message).toContain('expected one of: runAt, delayMs, ');
  });

  it('tx given with the task rather than to the call is refused, not silently outside the transaction', () => {
    // enqueueMany's items and ctx.enqueue: tx has no place there
    expect(thrown(() => build({ tx: {} } as Options)).message).toMatch(/invalid enqueue option "tx": .*enqueueMany/);
    expect(thrown(() => buildTaskRow('q', {}, { tx: {} } as Options, DEFAULTS, '42')).message).toMatch(/invalid enqueue option "tx": .*parent/);
  });

  it('validates the queue name before the options and the options before the payload', () => {
    expect(thrown(() => buildTaskRow('', () => 1, { priority: 1.5 }, DEFAULTS))).toBeInstanceOf(InvalidQueueNameError);
    expect(thrown(() => buildTaskRow('q', () => 1, { priority: 1.5 }, DEFAULTS))).toBeInstanceOf(InvalidEnqueueOptionsError);
  });
});
