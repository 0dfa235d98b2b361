import { randomUUID } from 'node:crypto';
import { PgQueueError } from '../errors';
import type { PrismaClientLike } from '../types';
import { quoteIdent } from './identifiers';
import { splitSqlScript } from './sql-script';

/** What an index build needs of the installer's options (see InstallOptions). */
export interface IndexBuildOptions {
  concurrentLockWaitMs: number;
  logger: { warn(message: string): void };
}

/**
 * A `concurrently` step: one CREATE INDEX or DROP INDEX, run CONCURRENTLY outside the caller's
 * transaction (which holds the install lock and no lock on the table). An index of that name left
 * invalid by an interrupted build is dropped first; a valid one is kept.
 */
export async function runConcurrently(prisma: PrismaClientLike, schema: string, sql: string, o: IndexBuildOptions): Promise<void> {
  const statements = splitSqlScript(sql);
  const body = statements.length === 1 ? withoutLeadingComments(statements[0]) : '';
  const create = /^CREATE\s+(UNIQUE\s+)?INDEX\s+(?:CONCURRENTLY\s+)?(?:IF\s+NOT\s+EXISTS\s+)?([a-z_][a-z0-9_]*)\s+ON\s+([\s\S]+)$/i.exec(body);
  if (create) {
    const [, unique = '', name, rest] = create;
    const index = `${quoteIdent(schema)}.${quoteIdent(name)}`;
    const validity = async () =>
      (await prisma.$queryRawUnsafe<{ valid: boolean }[]>('SELECT indisvalid AS valid FROM pg_index WHERE indexrelid = to_regclass($1)', index))[0]?.valid;
    const before = await validity();
    if (before === true) return;
    if (before === false) {
      o.logger.warn(`schema install: index ${index} is invalid (an interrupted CONCURRENTLY build left it): dropping it and building it again`);
      await watched(prisma, `DROP INDEX CONCURRENTLY IF EXISTS ${index}`, o);
    }
    await watched(prisma, `CREATE ${unique}INDEX CONCURRENTLY IF NOT EXISTS ${quoteIdent(name)} ON ${rest}`, o);
    if ((await validity()) !== true) throw new PgQueueError(`pg-queue: schema install: index ${index} is not valid after its CONCURRENTLY build`);
    return;
  }
  const drop = /^DROP\s+INDEX\s+(?:CONCURRENTLY\s+)?(IF\s+EXISTS\s+)?([\s\S]+)$/i.exec(body);
  if (drop) return watched(prisma, `DROP INDEX CONCURRENTLY ${drop[1] ?? ''}${drop[2]}`, o);
  throw new PgQueueError(`pg-queue: schema install: a 'concurrently' step must be one CREATE INDEX or DROP INDEX statement, got: ${sql.trim().slice(0, 80)}`);
}

/**
 * Runs a statement that cannot run in a transaction (so no SET LOCAL lock_timeout), tagged, and
 * cancels it if it waits for a lock longer than concurrentLockWaitMs.
 */
async function watched(prisma: PrismaClientLike, statement: string, o: IndexBuildOptions): Promise<void> {
  const tag = `/* pg-queue schema install ${randomUUID()} */`;
  let settled = false;
  let cancelled: string | null = null;
  const run = Promise.resolve(prisma.$executeRawUnsafe(`${tag} ${statement}`)).finally(() => (settled = true));
  const watch = (async () => {
    let waitingSince: number | null = null;
    while (!settled) {
      await Promise.race([run.catch(() => undefined), sleep(500)]);
      if (settled) return;
      const [row] = await Promise.resolve(
        prisma.$queryRawUnsafe<{ pid: number; waiting: boolean; blockers: number[] }[]>(
          `SELECT pid, wait_event_type = 'Lock' AS waiting, pg_blocking_pids(pid) AS blockers FROM pg_stat_activity
           WHERE starts_with(query, $1) AND pid <> pg_backend_pid()`,
          tag,
        ),
      ).catch(() => []);
      if (!row?.waiting) {
        waitingSince = null;
        continue;
      }
      waitingSince ??= Date.now();
      if (Date.now() - waitingSince > o.concurrentLockWaitMs) {
        cancelled = `waited more than ${o.concurrentLockWaitMs} ms for older transactions (pids ${row.blockers.join(', ') || '?'})`;
        await Promise.resolve(prisma.$queryRawUnsafe('SELECT pg_cancel_backend($1::int)', row.pid)).catch(() => undefined);
        return;
      }
    }
  })();
  try {
    await run;
  } catch (err) {
    if (cancelled) {
      throw new PgQueueError(`pg-queue: schema install: ${statement} ${cancelled} and was cancelled; start again once they ended (an index it left invalid is rebuilt)`);
    }
    throw err;
  } finally {
    await watch;
  }
}

function withoutLeadingComments(statement: string): string {
  return statement.replace(/^(?:\s+|--[^\n]*(?:\n|$)|\/\*[\s\S]*?\*\/)*/, '').trim();
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
