import { Client } from 'pg';
import type { PrismaClientLike, SqlExecutor } from '../types';

/**
 * The CLI's stand-in for an app's PrismaClient: the queue's statements on one `pg` connection.
 * The statements return what Prisma's driver adapter returns for them (ids and counts are cast
 * in SQL; timestamptz arrives as Date, jsonb parsed), so the library's repositories and TaskQueue
 * run on it unchanged. One connection, so a transaction is simply BEGIN … COMMIT on it.
 */
export class PgExecutor implements PrismaClientLike {
  private constructor(private readonly client: Client) {}

  static async connect(url: string): Promise<PgExecutor> {
    const client = new Client({ connectionString: url, application_name: 'pg-queue cli' });
    client.on('error', () => undefined); // a dropped connection fails the next query instead
    await client.connect();
    return new PgExecutor(client);
  }

  async $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): Promise<T> {
    return (await this.client.query(query, values)).rows as T;
  }

  async $executeRawUnsafe(query: string, ...values: unknown[]): Promise<number> {
    return (await this.client.query(query, values)).rowCount ?? 0;
  }

  async $transaction<R>(fn: (tx: SqlExecutor) => Promise<R>): Promise<R> {
    await this.client.query('BEGIN');
    try {
      const result = await fn(this);
      await this.client.query('COMMIT');
      return result;
    } catch (err) {
      await this.client.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
  }

  $disconnect(): Promise<void> {
    return this.client.end();
  }
}
