/**
 * `npm run demo` as users run it: repeatable against the same database (it checks only its own
 * run's orders), and a DATABASE_URL it cannot use is one line naming host and port.
 */
import { Logger } from '@nestjs/common';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { runDemo } from '../../src/demo/run-demo';
import { portNobodyListensOn } from '../support/free-port';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

const ROOT = path.resolve(__dirname, '..', '..');

describe('the demo', () => {
  let db: TestDatabase;
  const saved = process.env.DATABASE_URL;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    process.env.DATABASE_URL = saved;
    await db.drop();
  });

  it('passes its own checks twice in a row on the same database', async () => {
    process.env.DATABASE_URL = db.url;
    const output: string[] = [];
    const log = jest.spyOn(console, 'log').mockImplementation((...args: unknown[]) => void output.push(args.join(' ')));
    const warn = jest.spyOn(Logger.prototype, 'warn');
    try {
      const first = await runDemo({ orders: 20, httpConcurrency: 4, pings: 3 });
      const second = await runDemo({ orders: 20, httpConcurrency: 4, pings: 3 });
      expect({ first, second, failed: output.filter((l) => l.includes('FAILED')) }).toEqual({ first: 0, second: 0, failed: [] });
      // The example app's pool fits its queues: no connection budget warning at startup.
      expect(warn.mock.calls.map(([m]) => String(m)).filter((m) => m.startsWith('connection budget'))).toEqual([]);
      expect((await db.sql('SELECT count(*)::int AS n FROM orders'))[0].n).toBe(40);
    } finally {
      log.mockRestore();
      warn.mockRestore();
      process.env.DATABASE_URL = saved;
    }
  }, 120_000);

  it('an unreachable DATABASE_URL is one line naming host and port, without the password', async () => {
    const port = await portNobodyListensOn();
    const res = spawnSync(process.execPath, [path.join(ROOT, 'scripts/demo.js')], {
      cwd: ROOT,
      env: { ...process.env, DATABASE_URL: `postgresql://app:s3cret@127.0.0.1:${port}/shop` },
      encoding: 'utf8',
      timeout: 30_000,
    });
    const errLines = res.stderr.split('\n').filter((l) => l.trim() !== '' && !l.startsWith('npm warn'));
    expect({ status: res.status, errLines }).toEqual({
      status: 1,
      errLines: [
        `demo: cannot use PostgreSQL at 127.0.0.1:${port}/shop (connection refused). DATABASE_URL looks like postgresql://USER:PASSWORD@HOST:5432/DATABASE; unset it to run on a throwaway local PostgreSQL.`,
      ],
    });
    expect(res.stdout + res.stderr).not.toContain('s3cret');
  });
});
