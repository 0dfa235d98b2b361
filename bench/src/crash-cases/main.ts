/**
 * `npm run demo:bullmq` (bench/bullmq-crash-cases.js): three crash cases of an orders feature, run
 * against BullMQ 6 on its PostgreSQL backend and against pg-queue, each in real processes; the
 * table's cells are read from the database afterwards. See child.ts for what each process does.
 *
 *   (a) the process dies after the order's commit (before BullMQ's `queue.add`);
 *   (b) the confirmation is added in the order's transaction, which then rolls back;
 *   (c) the worker is killed after its database write, before the job completes.
 *
 * One fresh database (on DATABASE_URL's server, dropped afterwards, or on a throwaway local
 * PostgreSQL when DATABASE_URL is unset). Exits 0 when every step ran and pg-queue's outcomes are
 * the ones its guarantees promise; BullMQ's are reported as they are. Every wait is bounded.
 */
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Client } from 'pg';
import { printSchemaSql } from '@app/pg-queue/sql/schema.sql';
import { readOutcomes, unfinished, type CaseId, type Lib, type Outcome } from './outcomes';
import { startChild, waitUntil } from './processes';
import { describeSettings } from './settings';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const { startLocalPostgres } = require('../../../scripts/local-postgres.js') as {
  startLocalPostgres: (o: { label: string; settings: Record<string, string> }) => Promise<{ url: string; port: number; stop: () => void }>;
};
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { migrate } = require('../../../scripts/migrate.js') as { migrate: (url: string) => Promise<string[]> };

const LIBS: Lib[] = ['bullmq', 'pg-queue'];
const CASES: Record<CaseId, string> = {
  a: '(a) process died after the order committed',
  b: '(b) job added, then the transaction rolled back',
  c: '(c) worker killed after its write',
};
/** The surviving worker's bound for ending every job or task there is. */
const SETTLE_MS = 45_000;

const log = (line: string) => process.stderr.write(`${line}\n`);

function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

async function admin(url: string, statement: string): Promise<void> {
  const c = new Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(statement);
  } finally {
    await c.end();
  }
}

/** The example app's tables (orders), pg-queue's schema, and the demonstration's counter and run log. */
async function prepare(db: Client, url: string): Promise<void> {
  await migrate(url);
  await db.query(printSchemaSql('pgqueue'));
  await db.query(`
    CREATE TABLE crash_demo_counter (lib text PRIMARY KEY, value int NOT NULL);
    INSERT INTO crash_demo_counter VALUES ('bullmq', 0), ('pg-queue', 0);
    CREATE TABLE crash_demo_run (lib text NOT NULL, queue text NOT NULL, ref text NOT NULL, pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());`);
}

/** The three cases of one library: their processes at once, then a surviving worker. */
async function runLibrary(db: Client, url: string, lib: Lib): Promise<Record<CaseId, Outcome>> {
  const a = startChild(lib, 'place-then-crash', url);
  const b = startChild(lib, 'place-then-roll-back', url);
  const c = startChild(lib, 'bump-then-crash', url);
  const [orderA, orderB] = await Promise.all([
    a.line('CRASH-POINT').then((l) => {
      a.kill('SIGKILL');
      log(`${lib} (a): order ${l.split(' ')[1]} committed; its process SIGKILLed at the crash point`);
      return Number(l.split(' ')[1]);
    }),
    b.line('ROLLED-BACK').then((l) => {
      log(`${lib} (b): order ${l.split(' ')[1]} rolled back after the ${lib === 'bullmq' ? 'add' : 'enqueue'}`);
      return Number(l.split(' ')[1]);
    }),
    c.line('CRASH-POINT wrote').then(() => {
      c.kill('SIGKILL');
      log(`${lib} (c): the counter's handler wrote; its worker SIGKILLed before completing`);
    }),
  ]);
  await Promise.all([a.exited, b.exited, c.exited]);

  const survivor = startChild(lib, 'worker', url);
  try {
    await survivor.line('READY');
    log(`${lib}: a surviving worker started`);
    const ms = await waitUntil(`${lib}: every job or task ended`, SETTLE_MS, async () => (await unfinished(db, lib)) === 0);
    log(`${lib}: every job or task ended ${ms} ms after the survivor started`);
  } catch (err) {
    log(survivor.output());
    throw err;
  } finally {
    await survivor.stop();
  }
  return readOutcomes(db, lib, { a: orderA, b: orderB });
}

function table(results: Record<Lib, Record<CaseId, Outcome>>): string[] {
  const head = ['case', 'BullMQ-PG', 'pg-queue'];
  const body = (Object.keys(CASES) as CaseId[]).map((id) => [CASES[id], results.bullmq[id].text, results['pg-queue'][id].text]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((r) => r[i].length)));
  const line = (cells: string[]) => `| ${cells.map((cell, i) => cell.padEnd(widths[i])).join(' | ')} |`;
  return [line(head), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...body.map(line)];
}

async function main(): Promise<number> {
  const started = Date.now();
  const local = process.env.DATABASE_URL
    ? null
    : await startLocalPostgres({ label: 'crash-cases', settings: { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off' } });
  const serverUrl = process.env.DATABASE_URL ?? local!.url;
  log(local ? `database: throwaway local PostgreSQL on 127.0.0.1:${local.port} (set DATABASE_URL to use your own)` : 'database: a new database on DATABASE_URL\'s server');
  const stopLocal = () => local?.stop();
  process.once('SIGINT', () => {
    stopLocal();
    process.exit(130);
  });
  const name = `crash_cases_${randomBytes(4).toString('hex')}`;
  const url = withDatabase(serverUrl, name);
  let db: Client | null = null;
  try {
    await admin(serverUrl, `CREATE DATABASE ${name}`);
    db = new Client({ connectionString: url });
    await db.connect();
    await prepare(db, url);
    const results = {} as Record<Lib, Record<CaseId, Outcome>>;
    for (const lib of LIBS) results[lib] = await runLibrary(db, url, lib);

    const bullmqVersion = JSON.parse(fs.readFileSync(path.join(path.dirname(require.resolve('bullmq')), '..', '..', 'package.json'), 'utf8')).version;
    const out = [...describeSettings(bullmqVersion), '', ...table(results), ''];
    const unsafe = (Object.keys(CASES) as CaseId[]).filter((id) => !results['pg-queue'][id].safe);
    out.push(unsafe.length ? `pg-queue did not keep its promise in case(s) ${unsafe.join(', ')}` : 'pg-queue: every case as promised (the order and its task commit or roll back together; a killed handler\'s write rolls back)');
    out.push(`(${((Date.now() - started) / 1000).toFixed(0)} s)`);
    process.stdout.write(`${out.join('\n')}\n`);
    return unsafe.length ? 1 : 0;
  } finally {
    await db?.end().catch(() => undefined);
    if (local) stopLocal();
    else await admin(serverUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => undefined);
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    log(`demo:bullmq failed: ${(err as Error).stack ?? String(err)}`);
    process.exit(1);
  },
);
