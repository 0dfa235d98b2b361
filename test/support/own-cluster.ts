import { Client, Pool } from 'pg';
import { PrismaPg } from '@prisma/adapter-pg';
import { PrismaClient } from '../../src/generated/prisma/client';
import { waitFor } from './wait-for';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const { startLocalPostgres, runAsync } = require('../../scripts/local-postgres.js') as {
  startLocalPostgres: (o: { label?: string; settings?: Record<string, string | number> }) => Promise<{
    url: string;
    port: number;
    dataDir: string;
    bin: string;
    stop: () => void;
    restart: (mode?: string) => Promise<void>;
  }>;
  runAsync: (bin: string, args: string[]) => Promise<string>;
};
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { migrate } = require('../../scripts/migrate.js') as { migrate: (url: string) => Promise<string[]> };

/**
 * A Prisma client on `url` whose connections the server may terminate (a restart): through a pool
 * with an 'error' listener on each connection and on the pool, as the package README's Deployment
 * section tells apps to (a terminated backend can otherwise raise an unhandled 'error' from a
 * connection @prisma/adapter-pg has checked out; the checker met it under its restart fault).
 * Failed statements still fail; disconnecting the client ends the pool.
 */
export function terminablePrisma(url: string, max: number): PrismaClient {
  const pool = new Pool({ connectionString: url, max });
  pool.on('connect', (client) => client.on('error', () => undefined));
  pool.on('error', () => undefined);
  return new PrismaClient({ adapter: new PrismaPg(pool, { disposeExternalPool: true }) });
}

/**
 * A PostgreSQL cluster of a spec's own (for faults that would hurt other specs: a restart), with one
 * database migrated like the example app's. `sql` opens a connection per call, so it works right
 * after a restart.
 */
export interface OwnCluster {
  /** The migrated database. */
  url: string;
  port: number;
  prisma(poolSize?: number): PrismaClient;
  sql<T = any>(text: string, values?: unknown[]): Promise<T[]>;
  /** pg_ctl restart -m fast on the same port and data directory; resolves once it accepts connections. */
  restart(): Promise<void>;
  /**
   * pg_ctl restart -m immediate: the server dies as in a crash (what its WAL buffers held and had
   * not written is gone) and recovers from its WAL; resolves once it accepts connections.
   */
  crash(): Promise<void>;
  /**
   * pg_ctl stop -m smart, not waited for; resolves once the server refuses new connections ("the
   * database system is shutting down", 57P03), which it does until its last session ends, then
   * stops for good.
   */
  beginSmartShutdown(): Promise<void>;
  /** Disconnects the Prisma clients and removes the cluster. */
  stop(): Promise<void>;
}

/** `settings` override the defaults, which give up durability for speed (no spec crashes the machine). */
export async function startOwnCluster(label: string, settings: Record<string, string | number> = {}): Promise<OwnCluster> {
  const pg = await startLocalPostgres({ label, settings: { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off', ...settings } });
  const admin = new Client({ connectionString: pg.url });
  await admin.connect();
  await admin.query('CREATE DATABASE app');
  await admin.end();
  const u = new URL(pg.url);
  u.pathname = '/app';
  const url = u.toString();
  await migrate(url);
  const clients: PrismaClient[] = [];
  const cluster: OwnCluster = {
    url,
    port: pg.port,
    prisma(poolSize = 10) {
      const client = terminablePrisma(url, poolSize);
      clients.push(client);
      return client;
    },
    async sql(text, values) {
      const c = new Client({ connectionString: url });
      // A restart's FATAL may reach the connection between statements: the call's query fails (or
      // the next one does), instead of an unhandled 'error' event failing whichever test runs.
      c.on('error', () => undefined);
      await c.connect();
      try {
        return (await c.query(text, values as unknown[])).rows;
      } finally {
        await c.end().catch(() => undefined);
      }
    },
    restart: () => pg.restart('fast'),
    crash: () => pg.restart('immediate'),
    async beginSmartShutdown() {
      await runAsync(`${pg.bin}/pg_ctl`, ['-D', pg.dataDir, '-m', 'smart', '-W', 'stop']);
      await waitFor('the server to refuse new connections', () => cluster.sql('SELECT 1').then(() => false, (err: { code?: string }) => err.code === '57P03'), { timeoutMs: 30_000, everyMs: 50 });
    },
    async stop() {
      await Promise.all(clients.map((c) => c.$disconnect().catch(() => undefined)));
      pg.stop();
    },
  };
  return cluster;
}
