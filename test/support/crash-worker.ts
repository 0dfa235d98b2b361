import { spawn, type ChildProcess } from 'node:child_process';
import * as path from 'node:path';
import type { INestApplicationContext } from '@nestjs/common';
import { rescueExpiredLeases } from '@app/pg-queue/testing';
import { track } from './leftovers';

const ROOT = path.resolve(__dirname, '..', '..');

export interface CrashWorker {
  child: ChildProcess;
  /** Resolves with the first output line starting with `marker` (rejects if the worker exits first). */
  line(marker: string): Promise<string>;
  exited: Promise<number | null>;
  output(): string;
}

/**
 * Runs test/fixtures/crash-worker.ts in its own process (label becomes part of its workerId). It is
 * killed with its test database at the latest, and exits by itself when this process goes (its
 * IPC channel closes).
 */
export function startCrashWorker(url: string, label: string): CrashWorker {
  const child = spawn(process.execPath, ['-r', path.join(ROOT, 'test/support/ts-register.js'), path.join(ROOT, 'test/fixtures/crash-worker.ts'), url, label], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  let out = '';
  let err = '';
  const waiters: { marker: string; resolve: (l: string) => void }[] = [];
  const check = () => {
    for (const w of [...waiters]) {
      const found = out.split('\n').find((l) => l.startsWith(w.marker));
      if (found) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(found);
      }
    }
  };
  child.stdout!.on('data', (d) => {
    out += d;
    check();
  });
  child.stderr!.on('data', (d) => (err += d));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code, signal) => resolve(signal ? null : code)));
  const stop = track(url, async () => {
    child.kill('SIGKILL');
    await exited;
  });
  void exited.then(stop);
  return {
    child,
    exited,
    output: () => out,
    line(marker) {
      return new Promise<string>((resolve, reject) => {
        waiters.push({ marker, resolve });
        check();
        void exited.then(() => setTimeout(() => reject(new Error(`worker exited before "${marker}":\n${out}\n${err}`)), 100));
      });
    },
  };
}

/** Retries the rescuer until it returned a task (its lease must expire first); no fixed sleeps. */
export async function rescueWhenExpired(app: INestApplicationContext, timeoutMs = 20_000): Promise<{ rescued: number; dead: number }> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const res = await rescueExpiredLeases(app);
    if (res.rescued > 0) return res;
    if (Date.now() > until) throw new Error('no lease expired in time');
    await new Promise((r) => setTimeout(r, 100));
  }
}
