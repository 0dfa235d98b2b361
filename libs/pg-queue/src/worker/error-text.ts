import { LONE_SURROGATE } from '../core/task-rules';

const LONE_SURROGATES = new RegExp(LONE_SURROGATE.source, 'g');

/**
 * `text` as Postgres stores it in text and jsonb alike: U+0000 (neither accepts it) dropped, and
 * every unpaired UTF-16 surrogate (jsonb rejects its JSON escape) replaced by U+FFFD.
 */
export function storableText(text: string): string {
  return text.replace(/\u0000/g, '').replace(LONE_SURROGATES, '\uFFFD');
}

/**
 * Error text as stored in `last_error`: message plus a short stack, cut to a byte budget at a
 * character boundary, so a row stays under Postgres' TOAST threshold however long the error.
 */
export function errorText(err: unknown, maxBytes: number): string {
  let text: string;
  if (err instanceof Error) {
    const stack = err.stack ?? '';
    const frames = stack.split('\n').slice(1, 6).join('\n');
    text = `${err.name}: ${err.message}${frames ? `\n${frames}` : ''}`;
  } else {
    try {
      text = typeof err === 'string' ? err : JSON.stringify(err) ?? String(err);
    } catch {
      text = safeString(err);
    }
  }
  return truncateUtf8(storableText(text), maxBytes);
}

/**
 * An error as one log line. Prisma wraps driver errors in a message that begins with blank lines
 * and the call site ("Invalid `prisma.$queryRawUnsafe()` invocation:"); what went wrong is its
 * last non-empty line.
 */
export function logLine(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const lines = message.split('\n').map((l) => l.trim()).filter((l) => l !== '');
  return lines.at(-1) ?? (err instanceof Error ? err.name : 'unknown error');
}

export function truncateUtf8(text: string, maxBytes: number): string {
  if (Buffer.byteLength(text, 'utf8') <= maxBytes) return text;
  const marker = '…[truncated]';
  const budget = maxBytes - Buffer.byteLength(marker, 'utf8');
  const buf = Buffer.from(text, 'utf8').subarray(0, Math.max(0, budget));
  // Drop a trailing partial multi-byte character: find the last lead byte, check its length.
  let end = buf.length;
  if (end > 0) {
    let p = end - 1;
    while (p > 0 && (buf[p] & 0xc0) === 0x80) p--;
    const lead = buf[p];
    const len = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
    if (p + len > end) end = p;
  }
  return buf.subarray(0, end).toString('utf8') + marker;
}

/** String(x) throws for objects without a usable toString (Object.create(null), hostile getters). */
function safeString(value: unknown): string {
  try {
    return String(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}
