import { randomBytes } from 'node:crypto';
import { Client } from 'pg';
import { PrismaPg } from '@prisma/adapter-pg';
import { PrismaClient } from '../../src/generated/prisma/client';
import { closeLeftovers, ownerOf, track } from './leftovers';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const { migrate } = require('../../scripts/migrate.js') as { migrate: (url: string) => Promise<string[]> };

// Captured at load: e2e specs point DATABASE_URL at their own database for the example app.
const SERVER_URL = process.env.DATABASE_URL;

export function serverUrl(): string {
  const url = SERVER_URL;
  if (!url) throw new Error('DATABASE_URL is not set: run the tests with `npm test`');
  return url;
}

function withDatabase(url: string, db: string): string {
  const u = new URL(url);
  u.pathname = `/${db}`;
  return u.toString();
}

export interface TestDatabase {
  url: string;
  name: string;
  /** A new PrismaClient on this database (closed by `drop`, as are apps booted on it). */
  prisma(poolSize?: number): PrismaClient;
  /** A plain pg client for assertions that must not go through the library. */
  sql<T = any>(text: string, values?: unknown[]): Promise<T[]>;
  drop(): Promise<void>;
}

/** A fresh database with the example app's migrations applied; one per test file. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const name = `t_${randomBytes(6).toString('hex')}`;
  const admin = new Client({ connectionString: serverUrl() });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = withDatabase(serverUrl(), name);
  await migrate(url);
  const clients: PrismaClient[] = [];
  const plain = new Client({ connectionString: url });
  await plain.connect();
  return {
    url,
    name,
    prisma(poolSize = 10) {
      const client = new PrismaClient({ adapter: new PrismaPg({ connectionString: url, max: poolSize }) });
      clients.push(client);
      ownerOf.set(client, url);
      return client;
    },
    async sql(text, values) {
      return (await plain.query(text, values as unknown[])).rows;
    },
    // Tracked: if the spec never gets to drop it, the file's last afterAll does.
    drop: track(
      url,
      async () => {
        await closeLeftovers(url); // apps and workers still running on it (a test failed)
        await Promise.all(clients.map((c) => c.$disconnect().catch(() => undefined)));
        await plain.end().catch(() => undefined);
        const a = new Client({ connectionString: serverUrl() });
        await a.connect();
        try {
          await a.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
        } finally {
          await a.end();
        }
      },
      true,
    ),
  };
}
