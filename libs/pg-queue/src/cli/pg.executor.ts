import { Client } from 'pg';
import type { PrismaClientLike, SqlExecutor, TransactionOptionsLike } from '../types';

/**
 * The CLI's stand-in for an app's PrismaClient: the queue's statements on one `pg` connection.
 * The statements return what Prisma's driver adapter returns for them (ids and counts are cast
 * in SQL; timestamptz arrives as Date, jsonb parsed), so the library's repositories and TaskQueue
 * run on it unchanged. One connection, so a transaction is simply BEGIN … COMMIT on it. It
 * connects at its first statement: with --read-url, a command that reads only the replica never
 * opens a connection to the primary (nor needs its URL).
 */
export class PgExecutor implements PrismaClientLike {
  private client: Promise<Client> | null = null;

  /** `url` is asked for at the first statement (it may throw then: no URL given). */
  constructor(
    private readonly url: () => string,
    private readonly applicationName = 'pg-queue cli',
  ) {}

  /** Connects now (a replica: its connection errors are reported before the command runs). */
  static async connect(url: string, applicationName?: string): Promise<PgExecutor> {
    const executor = new PgExecutor(() => url, applicationName);
    await executor.connection();
    return executor;
  }

  async $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): Promise<T> {
    return (await (await this.connection()).query(query, values)).rows as T;
  }

  async $executeRawUnsafe(query: string, ...values: unknown[]): Promise<number> {
    return (await (await this.connection()).query(query, values)).rowCount ?? 0;
  }

  /** Honours the one isolation level the library asks for (see read-committed.ts); the time bounds are Prisma's pool's, not needed on one connection. */
  async $transaction<R>(fn: (tx: SqlExecutor) => Promise<R>, options?: TransactionOptionsLike): Promise<R> {
    const client = await this.connection();
    await client.query(options?.isolationLevel === 'ReadCommitted' ? 'BEGIN ISOLATION LEVEL READ COMMITTED' : 'BEGIN');
    try {
      const result = await fn(this);
      await client.query('COMMIT');
      return result;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
  }

  async $disconnect(): Promise<void> {
    const client = await this.client?.catch(() => null);
    await client?.end();
  }

  private connection(): Promise<Client> {
    return (this.client ??= (async () => {
      const client = new Client({ connectionString: this.url(), application_name: this.applicationName });
      client.on('error', () => undefined); // a dropped connection fails the next query instead
      await client.connect();
      return client;
    })());
  }
}
