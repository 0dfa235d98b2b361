/**
 * `npm run demo:bullmq` as a user runs it (bench/bullmq-crash-cases.js, on a database it creates
 * on the test server and drops): it exits 0, and its table says what the package README's
 * "Coming from BullMQ" quotes. pg-queue's column is what its guarantees promise; BullMQ's is what
 * its pinned version (6.7.0, a devDependency) does on its PostgreSQL backend.
 */
import { spawn } from 'node:child_process';
import * as path from 'node:path';
import { serverUrl } from '../support/test-database';

const ROOT = path.resolve(__dirname, '..', '..');

function run(): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [path.join(ROOT, 'bench/bullmq-crash-cases.js')], {
      cwd: ROOT,
      env: { ...process.env, DATABASE_URL: serverUrl() },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 150_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

describe('npm run demo:bullmq', () => {
  it('runs the three crash cases against both libraries; pg-queue keeps every promise', async () => {
    const res = await run();
    const rows = Object.fromEntries(
      res.stdout
        .split('\n')
        .filter((l) => /^\| \([abc]\)/.test(l))
        .map((l) => {
          const [name, bullmq, pgQueue] = l.split('|').slice(1, 4).map((c) => c.trim());
          return [name.slice(1, 2), { bullmq, pgQueue }];
        }),
    );
    expect({ code: res.code, rows, stderr: res.code === 0 ? '' : res.stderr }).toEqual({
      code: 0,
      rows: {
        a: { bullmq: "order stays 'new', never confirmed: 0 jobs, ran 0x", pgQueue: 'order confirmed: 1 task (done), ran 1x' },
        b: { bullmq: 'no order; 1 job (failed), ran 5x against the missing order', pgQueue: 'no order; 0 tasks, ran 0x' },
        c: { bullmq: 'counter = 2: ran 2x, 1 job (completed)', pgQueue: 'counter = 1: ran 2x, 1 task (done)' },
      },
      stderr: '',
    });
    expect(res.stdout).toContain('pg-queue: every case as promised');
  }, 180_000);
});
