/**
 * The SQLSTATE and message of a database error as Prisma reports it, or null for anything else
 * (no connection, a Prisma timeout, ...).
 */
export function databaseError(err: unknown): { code: string; message: string } | null {
  const e = err as { code?: unknown; message?: unknown; meta?: { code?: unknown; message?: unknown; driverAdapterError?: { cause?: { originalCode?: unknown; originalMessage?: unknown } } } } | null;
  const cause = e?.meta?.driverAdapterError?.cause;
  const text = typeof e?.message === 'string' ? e.message : '';
  const code = [cause?.originalCode, e?.meta?.code, /Code: `([0-9A-Z]{5})`/.exec(text)?.[1]].find((c): c is string => typeof c === 'string' && /^[0-9A-Z]{5}$/.test(c));
  if (code === undefined) return null;
  const message = [cause?.originalMessage, e?.meta?.message, /Message: `([\s\S]*)`/.exec(text)?.[1]].find((m): m is string => typeof m === 'string') ?? text;
  return { code, message };
}

/** A wait for a lock that gave up at its lock_timeout (SQLSTATE 55P03), as Prisma or `pg` reports it. */
export function isLockTimeout(err: unknown): boolean {
  return databaseError(err)?.code === '55P03' || (err as { code?: unknown } | null)?.code === '55P03';
}
