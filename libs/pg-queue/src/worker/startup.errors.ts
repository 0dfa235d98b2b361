import { PgQueueError } from '../errors';
import { prismaServer } from '../prisma-adapter';

/** What each connection failure Prisma's driver adapter recognises says, at startup. */
const UNREACHABLE: Record<string, string> = {
  DatabaseNotReachable: 'cannot reach PostgreSQL',
  ConnectionClosed: 'PostgreSQL closed the connection',
  SocketTimeout: 'timed out connecting to PostgreSQL',
  TlsConnectionError: 'TLS connection to PostgreSQL failed',
};

/**
 * Server states that turn a connection away (SQLSTATE class 57, operator intervention): what a
 * process starting during a restart, failover or shutdown meets.
 */
const SERVER_STATE: Record<string, string> = {
  '57P01': 'ended the connection', // admin_shutdown (a fast shutdown or pg_terminate_backend)
  '57P02': 'ended the connection', // crash_shutdown
  '57P03': 'is not accepting connections', // cannot_connect_now (starting up, shutting down, recovering)
};

interface AdapterCause {
  kind?: string;
  /** kind 'postgres' (any error the adapter does not name): the SQLSTATE and the server's words. */
  code?: string;
  message?: string;
  host?: string;
  port?: number;
  db?: string;
  originalMessage?: string;
  reason?: string;
}

/**
 * The one-line startup error for a database that cannot be used (unreachable, no such database,
 * role refused, connections turned away: too many, or the server shutting down or starting up),
 * naming where it was looked for; null for any other error. Prisma's driver adapter
 * reports these as `meta.driverAdapterError.cause` ({ kind: 'DatabaseNotReachable', host, port },
 * { kind: 'DatabaseDoesNotExist', db }, { kind: 'DatabaseAccessDenied', originalMessage }); the
 * server's address and role, when the cause lacks them, come from the client's adapter config.
 *
 * The error is the whole report: it carries no `cause`. The line already says what the driver
 * reported, and a `cause` is printed again beside it: Jest reports it as a second failure ("Cause:
 * PrismaClientKnownRequestError: Can't reach database server at …", under a second copy of the
 * spec's failing line), and Node, for a `main.ts` whose bootstrap rejects, prints Prisma's whole
 * error after the line (its meta and stacks into Prisma's minified runtime).
 */
export function startupConnectionError(err: unknown, prisma: unknown): PgQueueError | null {
  const cause = (err as { meta?: { driverAdapterError?: { cause?: AdapterCause } } })?.meta?.driverAdapterError?.cause;
  if (!cause?.kind) return null;
  const server = prismaServer(prisma);
  const host = cause.host ?? server?.host;
  const port = cause.port ?? server?.port;
  const at = host ? ` at ${host}${port ? `:${port}` : ''}` : '';
  let message: string;
  if (cause.kind in UNREACHABLE) {
    const reason = cause.reason ? ` (${cause.reason})` : '';
    message = `${UNREACHABLE[cause.kind]}${at}${reason} at startup; is the server running and the connection string right?`;
  } else if (cause.kind === 'DatabaseDoesNotExist') {
    message = `PostgreSQL${at} has no database ${JSON.stringify(cause.db ?? server?.database ?? '?')} (at startup); is the connection string right?`;
  } else if (cause.kind === 'DatabaseAccessDenied' || cause.kind === 'AuthenticationFailed') {
    const role = server?.user ? ` role ${JSON.stringify(server.user)}` : ' the connection';
    message = `PostgreSQL${at} refused${role} (at startup): ${cause.originalMessage ?? 'access denied'}`;
  } else if (cause.kind === 'TooManyConnections') {
    message = `PostgreSQL${at} refused the connection (at startup): ${cause.originalMessage ?? 'too many connections'}`;
  } else if (cause.kind === 'postgres' && cause.code && cause.code in SERVER_STATE) {
    message = `PostgreSQL${at} ${SERVER_STATE[cause.code]} (at startup): ${cause.message ?? cause.originalMessage ?? cause.code}`;
  } else {
    return null;
  }
  return new PgQueueError(`pg-queue: ${message}`);
}
