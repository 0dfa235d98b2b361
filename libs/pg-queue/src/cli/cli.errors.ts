import { PgQueueError } from '../errors';

/** Exit codes scripts can rely on (also in `pg-queue --help`). */
export const EXIT = { ok: 0, notFound: 1, usage: 2, database: 3 } as const;

/** A failure the CLI reports in one line and an exit code. */
export class CliFailure extends Error {
  constructor(
    message: string,
    readonly code: number,
  ) {
    super(message);
  }
}

const CONNECT_REASONS: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ENOTFOUND: 'host not found',
  ETIMEDOUT: 'timed out',
  EHOSTUNREACH: 'host unreachable',
  '28P01': 'password authentication failed',
  '28000': 'not allowed to connect',
  '3D000': 'no such database',
};

/** Where a URL points, for messages: host:port/database, never the user's password. */
export function where(url: string): string {
  const u = new URL(url);
  return `${u.hostname}:${u.port || 5432}${u.pathname}`;
}

const URL_FORM = 'postgresql://USER:PASSWORD@HOST:5432/DATABASE';

/** The database URL from --database-url or DATABASE_URL, checked; a CliFailure (exit 3) otherwise. */
export function databaseUrl(given: string | undefined): string {
  const url = given ?? process.env.DATABASE_URL;
  if (!url) throw new CliFailure(`pg-queue: no database: pass --database-url or set DATABASE_URL (${URL_FORM})`, EXIT.database);
  return postgresUrl(url, 'the database URL');
}

/** `url` when it is a postgresql:// URL; a CliFailure (exit 3) naming `what` otherwise. */
export function postgresUrl(url: string, what: string): string {
  let ok = false;
  try {
    ok = /^postgres(ql)?:$/.test(new URL(url).protocol);
  } catch {
    ok = false;
  }
  if (!ok) throw new CliFailure(`pg-queue: ${what} is not a postgresql:// URL (${URL_FORM})`, EXIT.database);
  return url;
}

/** An error as the CLI reports it: its line and exit code. */
export function failureOf(err: unknown, url: string | null): CliFailure {
  if (err instanceof CliFailure) return err;
  const code = (err as { code?: string }).code;
  if (url && code && code in CONNECT_REASONS) {
    return new CliFailure(`pg-queue: cannot use PostgreSQL at ${where(url)} (${CONNECT_REASONS[code]})`, EXIT.database);
  }
  if (err instanceof PgQueueError) return new CliFailure(err.message, EXIT.usage);
  const message = err instanceof Error ? err.message.split('\n').find((l) => l.trim() !== '') ?? err.name : String(err);
  return new CliFailure(`pg-queue: ${message}`, code ? EXIT.database : 1);
}
