import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Client } from 'pg';
import { PrismaPg } from '@prisma/adapter-pg';
import { PrismaClient } from '../../src/generated/prisma/client';
import { printSchemaSql } from '../../libs/pg-queue/src/sql/schema.sql';
import { installSchema } from '../../libs/pg-queue/src/sql/schema.installer';
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

/** Serialises the building of templates across Jest's workers (a session lock in the server's first database). */
const TEMPLATE_LOCK = 72_707_370;

/** What a template holds: the example app's migrations, and with `queue` the queue's schema `pgqueue` too. */
type TemplateKind = 'app' | 'queue';

/** A template's name: a hash of what it was built from, so a changed migration or schema gets a new one. */
function templateName(kind: TemplateKind): string {
  const dir = path.join(__dirname, '../../prisma/migrations');
  const hash = createHash('sha1');
  for (const name of fs.readdirSync(dir).sort()) {
    const file = path.join(dir, name, 'migration.sql');
    if (fs.existsSync(file)) hash.update(name).update(fs.readFileSync(file));
  }
  if (kind === 'queue') hash.update(printSchemaSql('pgqueue'));
  // The queue's schema holds a time of its install (migration 11's bound on the legacy archive
  // partition): a template of another day is not reused.
  const day = kind === 'queue' ? `_${new Date().toISOString().slice(0, 10).replace(/-/g, '')}` : '';
  return `tpl_${kind}_${hash.digest('hex').slice(0, 12)}${day}`;
}

const templates = new Map<TemplateKind, Promise<string>>();

/**
 * The template database of `kind`, built once per server (the first worker to ask builds it under
 * TEMPLATE_LOCK, under another name until it is whole) and cloned by CREATE DATABASE … TEMPLATE:
 * a copy of a few files instead of a migration of the app and of the queue in every spec file.
 * Templates of other contents (an older schema) are dropped when a new one is built.
 */
function template(kind: TemplateKind): Promise<string> {
  let made = templates.get(kind);
  if (made === undefined) {
    made = buildTemplate(kind);
    templates.set(kind, made);
    made.catch(() => templates.delete(kind));
  }
  return made;
}

async function buildTemplate(kind: TemplateKind): Promise<string> {
  const name = templateName(kind);
  const admin = new Client({ connectionString: serverUrl() });
  await admin.connect();
  try {
    // Bounded: a worker that stalls while building fails the others' specs after two minutes
    // instead of holding them forever (lock_timeout applies to an advisory lock's wait).
    await admin.query("SET lock_timeout = '120s'");
    await admin.query('SELECT pg_advisory_lock($1)', [TEMPLATE_LOCK]);
    const names = (await admin.query<{ datname: string }>("SELECT datname FROM pg_database WHERE datname LIKE 'tpl\\_%'")).rows.map((r) => r.datname);
    if (names.includes(name)) return name;
    // Others' (an older schema, another day, another checkout on this server): dropped unless in
    // use, which leaves a template another run is cloning from.
    const current = new Set([templateName('app'), templateName('queue')]);
    for (const stale of names.filter((n) => !current.has(n) && !n.endsWith('_building'))) {
      await admin.query(`DROP DATABASE IF EXISTS ${stale}`).catch(() => undefined);
    }
    const building = `${name}_building`;
    await admin.query(`DROP DATABASE IF EXISTS ${building} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${building}`);
    const url = withDatabase(serverUrl(), building);
    await migrate(url);
    if (kind === 'queue') {
      const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: url, max: 2 }) });
      try {
        await installSchema(prisma, 'pgqueue', undefined, { logger: { log() {}, warn() {} } });
      } finally {
        await prisma.$disconnect();
      }
    }
    // The rename, and every clone, needs the database without sessions: the pool's backends may
    // still be exiting after its disconnect (55006 "being accessed by other users") for a moment.
    for (let tries = 1; ; tries++) {
      try {
        await admin.query(`ALTER DATABASE ${building} RENAME TO ${name}`);
        return name;
      } catch (err) {
        if ((err as { code?: string }).code !== '55006' || tries === 50) throw err;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  } finally {
    await admin.query('SELECT pg_advisory_unlock($1)', [TEMPLATE_LOCK]).catch(() => undefined);
    await admin.end();
  }
}

/**
 * A fresh database with the example app's migrations applied; one per test file. With the queue's
 * schema `pgqueue` installed too, unless `queueSchema: false` (specs of the installer, of upgrades
 * from older releases, of a start without a schema).
 */
export async function createTestDatabase({ queueSchema = true }: { queueSchema?: boolean } = {}): Promise<TestDatabase> {
  const name = `t_${randomBytes(6).toString('hex')}`;
  const kind: TemplateKind = queueSchema ? 'queue' : 'app';
  const admin = new Client({ connectionString: serverUrl() });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name} TEMPLATE ${await template(kind)}`);
  } catch (err) {
    // 3D000: the template is gone (another run on this server dropped it): built again, once.
    if ((err as { code?: string }).code !== '3D000') throw err;
    templates.delete(kind);
    await admin.query(`CREATE DATABASE ${name} TEMPLATE ${await template(kind)}`);
  } finally {
    await admin.end();
  }
  const url = withDatabase(serverUrl(), name);
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
