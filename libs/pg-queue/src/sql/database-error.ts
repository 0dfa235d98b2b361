/**
 * The SQLSTATE and message of a database error as Prisma reports it, or null for anything else
 * (no connection, a Prisma timeout, ...): wrapped by the client (meta), in a raw query's message,
 * or a DriverAdapterError the adapter threw as it is (its `cause`), as an interactive transaction's
 * statements and its commit may.
 */
export function databaseError(err: unknown): { code: string; message: string } | null {
  type Cause = { originalCode?: unknown; originalMessage?: unknown };
  const e = err as { code?: unknown; message?: unknown; cause?: Cause; meta?: { code?: unknown; message?: unknown; driverAdapterError?: { cause?: Cause } } } | null;
  const cause = e?.meta?.driverAdapterError?.cause ?? (e instanceof Error && e.name === 'DriverAdapterError' ? e.cause : undefined);
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

/**
 * SQLSTATEs by which the server says the failure is its own state, not the statement's: a standby
 * not promoted yet behind the database's address (25006, read-only), a server shutting down or
 * restarting (57P01-57P03), a broken connection (class 08). An attempt that fails with one of
 * them lost its connection: given back uncounted, never a failed attempt.
 */
const CONNECTION_LOST = /^(25006|57P0[123]|08...)$/;

/** True for an error that means the database (not the task) failed: see CONNECTION_LOST. As Prisma or `pg` reports it. */
export function isConnectionLost(err: unknown): boolean {
  const code = databaseError(err)?.code ?? (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && CONNECTION_LOST.test(code);
}

/** What Prisma's driver adapter calls a connection it lost or could not open. */
const ADAPTER_UNREACHABLE = new Set(['DatabaseNotReachable', 'ConnectionClosed', 'SocketTimeout', 'TooManyConnections']);
/** Prisma's codes for the same, and for a pool that had no connection to give in time (P2024). */
const PRISMA_UNREACHABLE = new Set(['P1001', 'P1002', 'P1008', 'P1017', 'P2024']);
/** A statement that gave up on its time or on a lock, or a transaction the server chose to end. */
const BUSY = /^(57014|55P03|40001|40P01)$/;

/**
 * True for an error that says the connection is gone or could not be had: lost (see
 * isConnectionLost), a pool timeout, an unreachable server, or a socket the driver saw close
 * without a SQLSTATE (a client `pg` marked broken included). Unlike isDatabaseUnavailable, not a
 * statement that timed out or lost a deadlock: a user's transaction function counts those as its own.
 */
export function isConnectionGone(err: unknown): boolean {
  if (isConnectionLost(err)) return true;
  const e = err as { code?: unknown; message?: unknown; cause?: { kind?: unknown }; meta?: { driverAdapterError?: { cause?: { kind?: unknown } } } } | null;
  const kind = e?.meta?.driverAdapterError?.cause?.kind ?? e?.cause?.kind;
  if (typeof kind === 'string' && ADAPTER_UNREACHABLE.has(kind)) return true;
  if (typeof e?.code === 'string' && PRISMA_UNREACHABLE.has(e.code)) return true;
  return (
    typeof e?.message === 'string' &&
    /Connection terminated|Server has closed the connection|Can't reach database server|ECONNRESET|ECONNREFUSED|socket hang up|Timed out fetching a new connection|Client has encountered a connection error/i.test(e.message)
  );
}

/**
 * True for an error that says the database could not serve a statement right now: the connection
 * is gone (isConnectionGone), or the statement was timed out or chosen as a deadlock victim. What
 * the queue's own statements meet in a failover or under load; running the work again later is the
 * answer, never recording it as the task's failure.
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  if (isConnectionGone(err)) return true;
  const e = err as { code?: unknown } | null;
  const code = databaseError(err)?.code ?? (typeof e?.code === 'string' ? e.code : undefined);
  return code !== undefined && BUSY.test(code);
}
