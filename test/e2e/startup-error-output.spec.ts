/**
 * A startup that cannot use its database says so once, in one line, where a user meets it: in
 * Jest's report of the README's Jest recipe, and in what `node dist/main.js` (`nest new`'s main.ts)
 * prints before it exits. The one line names what the driver reported (host and port, database,
 * role and the server's words); the driver's own error is not shown again beside it. It was: Jest
 * printed the line, then the same failure as a "Cause:" (Prisma's "Can't reach database server at
 * …") under a second copy of the failing line of the spec, and Node printed the line followed by
 * Prisma's whole error (its meta, the adapter's error, stacks into Prisma's minified runtime).
 */
import { spawn } from 'node:child_process';
import * as path from 'node:path';
import { portNobodyListensOn } from '../support/free-port';
import { serverUrl } from '../support/test-database';

const ROOT = path.resolve(__dirname, '..', '..');

/** Runs a command to its end; everything it printed (stdout then stderr, without colours) and its exit code. */
function run(args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; printed: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: ROOT, env: { ...process.env, ...env, FORCE_COLOR: '0', NO_COLOR: '1' }, timeout: 90_000 });
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
    child.on('error', reject);
    // eslint-disable-next-line no-control-regex
    child.on('close', (code) => resolve({ code, printed: `${out}\n${err}`.replace(/\x1b\[[0-9;]*m/g, '') }));
  });
}

/** The README's Jest recipe, run by a Jest of its own (this repo's config: SWC, as the README's @swc/jest one). */
function jestRecipe(databaseUrl: string) {
  const jest = require.resolve('jest/bin/jest');
  return run([jest, '--ci', '--runInBand', '--testMatch', '<rootDir>/test/fixtures/readme-jest.fixture.ts'], { DATABASE_URL: databaseUrl });
}

/** `nest new`'s main.ts on the README's app, as `node dist/main.js` runs it. */
function nodeMain(databaseUrl: string) {
  return run(['-r', path.join(ROOT, 'test/support/ts-register.js'), path.join(ROOT, 'test/fixtures/readme-main.ts')], { DATABASE_URL: databaseUrl });
}

/** A connection string for each failure, what names it (a line naming it is about it), and the one line expected. */
const FAILURES: [string, () => Promise<{ url: string; names: string; line: RegExp }>][] = [
  [
    'a closed port',
    async () => {
      const port = await portNobodyListensOn();
      return { url: `postgresql://postgres@127.0.0.1:${port}/postgres`, names: `:${port}`, line: new RegExp(`^PgQueueError: pg-queue: cannot reach PostgreSQL at 127\\.0\\.0\\.1:${port} at startup; is the server running and the connection string right\\?$`) };
    },
  ],
  [
    'a database that does not exist',
    async () => {
      const u = new URL(serverUrl());
      u.pathname = '/no_such_db';
      return { url: u.toString(), names: 'no_such_db', line: /^PgQueueError: pg-queue: PostgreSQL at [\w.]+:\d+ has no database "no_such_db" \(at startup\); is the connection string right\?$/ };
    },
  ],
  [
    'a role that does not exist',
    async () => {
      const u = new URL(serverUrl());
      u.username = 'no_such_role';
      return { url: u.toString(), names: 'no_such_role', line: /^PgQueueError: pg-queue: PostgreSQL at [\w.]+:\d+ refused role "no_such_role" \(at startup\): role "no_such_role" does not exist$/ };
    },
  ],
];

/** What a run printed about the failure: the lines naming it, and whether Prisma's error was shown too. */
function about(printed: string, names: string) {
  return {
    linesNamingIt: printed.split('\n').map((l) => l.trim()).filter((l) => l.includes(names)),
    prismaErrorShown: /PrismaClient\w*Error|driverAdapterError|Cause:|\[?cause\]?:/.test(printed),
  };
}

describe('the output of a startup that cannot use its database', () => {
  it.each(FAILURES)('%s, under the README\'s Jest recipe: Jest reports the one line, once', async (_, failure) => {
    const { url, names, line } = await failure();
    const { code, printed } = await jestRecipe(url);
    expect({ code, ...about(printed, names), ran: /Tests: +1 failed, 1 total/.test(printed) }).toEqual({
      code: 1,
      linesNamingIt: [expect.stringMatching(line)],
      prismaErrorShown: false,
      ran: true,
    });
  }, 120_000);

  it.each(FAILURES)('%s, under `node dist/main.js`: the one line, once, and exit code 1', async (_, failure) => {
    const { url, names, line } = await failure();
    const { code, printed } = await nodeMain(url);
    expect({ code, ...about(printed, names) }).toEqual({
      code: 1,
      linesNamingIt: [expect.stringMatching(line)],
      prismaErrorShown: false,
    });
  }, 120_000);
});
