import { errorText, logLine, truncateUtf8 } from './error-text';

const MARKER = '…[truncated]';
const MARKER_BYTES = Buffer.byteLength(MARKER, 'utf8'); // '…' is 3 bytes: 14 in all
const bytes = (s: string) => Buffer.byteLength(s, 'utf8');

/** True when the string survives a UTF-8 round trip unchanged (no lone surrogates, no U+FFFD from a split). */
const wellFormed = (s: string) => Buffer.from(s, 'utf8').toString('utf8') === s && !s.includes('\uFFFD');

describe('truncateUtf8', () => {
  it('leaves text within the budget untouched', () => {
    expect(truncateUtf8('', 10)).toBe('');
    expect(truncateUtf8('hello', 5)).toBe('hello');
    expect(truncateUtf8('hello', 2048)).toBe('hello');
    // exactly at the budget, in bytes (6 characters, 12 bytes; 2 characters, 8 bytes)
    expect(truncateUtf8('ошибка', 12)).toBe('ошибка');
    expect(truncateUtf8('😀😀', 8)).toBe('😀😀');
  });

  it('cuts ASCII to exactly the budget, marker included', () => {
    const out = truncateUtf8('x'.repeat(500), 100);
    expect(bytes(out)).toBe(100);
    expect(out).toBe('x'.repeat(100 - MARKER_BYTES) + MARKER);
  });

  it('one byte over the budget is truncated', () => {
    const out = truncateUtf8('y'.repeat(101), 100);
    expect(out.endsWith(MARKER)).toBe(true);
    expect(bytes(out)).toBe(100);
  });

  it('a budget that fits only the marker yields just the marker', () => {
    expect(truncateUtf8('z'.repeat(100), MARKER_BYTES)).toBe(MARKER);
  });

  describe.each([
    ['2-byte', 'é', 2],
    ['2-byte (Cyrillic)', 'ж', 2],
    ['3-byte', '€', 3],
    ['3-byte (CJK)', '漢', 3],
    ['4-byte (emoji, a surrogate pair in JS)', '😀', 4],
    ['4-byte (CJK ext. B)', '𠜎', 4],
  ])('%s characters at the cut', (_label, ch, width) => {
    expect(bytes(ch)).toBe(width);

    // Every offset of the cut relative to the character: a prefix of k ASCII bytes moves the
    // character boundary through every byte position of the budget.
    it.each(Array.from({ length: width + 1 }, (_, k) => k))('never splits the character (ASCII prefix of %d bytes)', (k) => {
      const text = 'a'.repeat(k) + ch.repeat(200);
      for (const maxBytes of [MARKER_BYTES + 1, MARKER_BYTES + 2, MARKER_BYTES + 3, 64, 65, 66, 67, 100, 257, 301]) {
        const out = truncateUtf8(text, maxBytes);
        expect(bytes(out)).toBeLessThanOrEqual(maxBytes);
        expect(out.endsWith(MARKER)).toBe(true);
        const kept = out.slice(0, -MARKER.length);
        expect(wellFormed(kept)).toBe(true);
        expect(text.startsWith(kept)).toBe(true);
        // as much as fits: one more whole character would exceed the budget
        const next = text.slice(kept.length, kept.length + (text.codePointAt(kept.length)! > 0xffff ? 2 : 1));
        expect(bytes(kept) + bytes(next) + MARKER_BYTES).toBeGreaterThan(maxBytes);
      }
    });
  });

  it('handles text mixing 1-, 2-, 3- and 4-byte characters at every budget', () => {
    const text = 'aé€😀'.repeat(40);
    for (let maxBytes = MARKER_BYTES; maxBytes <= bytes(text) + 2; maxBytes++) {
      const out = truncateUtf8(text, maxBytes);
      expect(bytes(out)).toBeLessThanOrEqual(maxBytes);
      expect(wellFormed(out)).toBe(true);
      if (bytes(text) <= maxBytes) {
        expect(out).toBe(text);
      } else {
        const kept = out.slice(0, -MARKER.length);
        expect(out.endsWith(MARKER)).toBe(true);
        expect(text.startsWith(kept)).toBe(true);
      }
    }
  });
});

describe('errorText', () => {
  it('formats an Error as "Name: message" plus at most five stack frames', () => {
    const err = new TypeError('bad thing');
    const out = errorText(err, 4096);
    const lines = out.split('\n');
    expect(lines[0]).toBe('TypeError: bad thing');
    expect(lines.length).toBeGreaterThan(1);
    expect(lines.length).toBeLessThanOrEqual(6);
    for (const frame of lines.slice(1)) expect(frame).toMatch(/^\s+at /);
  });

  it('uses a custom error name', () => {
    class PaymentDeclined extends Error {
      override name = 'PaymentDeclined';
    }
    expect(errorText(new PaymentDeclined('card expired'), 4096)).toMatch(/^PaymentDeclined: card expired/);
  });

  it('an Error without a stack is just "Name: message"', () => {
    const err = new Error('no stack');
    err.stack = undefined;
    expect(errorText(err, 4096)).toBe('Error: no stack');
  });

  it('keeps short text untouched', () => {
    expect(errorText('short', 2048)).toBe('short');
  });

  it.each([
    ['a string', 'plain failure', 'plain failure'],
    ['a number', 42, '42'],
    ['null', null, 'null'],
    ['undefined', undefined, 'undefined'],
    ['a boolean', false, 'false'],
    ['a plain object', { code: 'E42', retry: true }, '{"code":"E42","retry":true}'],
    ['an array', [1, 'two'], '[1,"two"]'],
    ['a BigInt', 10n, '10'],
    ['a symbol', Symbol('sym'), 'Symbol(sym)'],
  ])('formats %s thrown as a non-Error value', (_label, value, expected) => {
    expect(errorText(value, 2048)).toBe(expected);
  });

  it('formats a function and a cyclic object without throwing', () => {
    expect(errorText(function named() {}, 2048)).toMatch(/named/);
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = cyclic;
    expect(errorText(cyclic, 2048)).toBe('[object Object]');
  });

  it('never throws, even for a value with neither JSON nor a string conversion', () => {
    // A null-prototype object with a cycle: JSON.stringify throws, and so does String().
    const bare = Object.create(null) as Record<string, unknown>;
    bare.self = bare;
    expect(() => errorText(bare, 2048)).not.toThrow();
    expect(typeof errorText(bare, 2048)).toBe('string');
  });

  it('removes NUL characters (Postgres text cannot store them), in messages and in non-Error values', () => {
    expect(errorText('a\u0000b\u0000\u0000c', 2048)).toBe('abc');
    const out = errorText(new Error('nul\u0000here'), 4096);
    expect(out).not.toContain('\u0000');
    expect(out.split('\n')[0]).toBe('Error: nulhere');
    expect(errorText({ k: 'v\u0000' }, 2048)).not.toContain('\u0000');
  });

  it('removes NULs before cutting, so they do not use up the budget', () => {
    const text = '\u0000'.repeat(1000) + 'ok';
    expect(errorText(text, 64)).toBe('ok');
  });

  it('cuts a long error to the byte budget at a character boundary, marker last', () => {
    const err = new Error('ошибка '.repeat(2000));
    for (const maxBytes of [64, 65, 100, 2047, 2048]) {
      const out = errorText(err, maxBytes);
      expect(bytes(out)).toBeLessThanOrEqual(maxBytes);
      expect(bytes(out)).toBeGreaterThanOrEqual(maxBytes - 3);
      expect(out.startsWith('Error: ')).toBe(true);
      expect(out.endsWith(MARKER)).toBe(true);
      expect(wellFormed(out)).toBe(true);
    }
  });

  it('cuts a long emoji message without leaving half a surrogate pair', () => {
    for (const maxBytes of [64, 65, 66, 67, 1000]) {
      const out = errorText('😀'.repeat(1000), maxBytes);
      expect(bytes(out)).toBeLessThanOrEqual(maxBytes);
      expect(wellFormed(out)).toBe(true);
    }
  });
});

describe('logLine', () => {
  it('keeps the last non-empty line: what a wrapped Prisma error says went wrong', () => {
    const prismaLike = new Error('\nInvalid `prisma.$queryRawUnsafe()` invocation:\n\n\nRaw query failed. Code: `N/A`. Message: `relation "x" does not exist`');
    expect(logLine(prismaLike)).toBe('Raw query failed. Code: `N/A`. Message: `relation "x" does not exist`');
    expect(logLine(new Error('plain'))).toBe('plain');
    expect(logLine(new TypeError(''))).toBe('TypeError');
    expect(logLine('a string\n')).toBe('a string');
  });
});
