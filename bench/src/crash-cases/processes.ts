/**
 * The demonstration's child processes (child.ts, compiled on load by the repository's SWC hook)
 * and bounded waits. Every wait has a deadline; a child is SIGKILLed by its parent at a crash
 * point, and exits by itself when the parent goes (its IPC channel closes).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import * as path from 'node:path';

const ROOT = path.resolve(__dirname, '..', '..', '..');

export interface Child {
  readonly name: string;
  /** The first output line starting with `marker`; rejects when the child exits first or after `timeoutMs`. */
  line(marker: string, timeoutMs?: number): Promise<string>;
  /** Resolves with the exit code (null when killed by a signal). */
  readonly exited: Promise<number | null>;
  kill(signal?: NodeJS.Signals): void;
  /** SIGTERM, then SIGKILL if it has not exited within `graceMs`. */
  stop(graceMs?: number): Promise<void>;
  output(): string;
}

const live = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of live) c.kill('SIGKILL');
});

export function startChild(lib: string, role: string, url: string): Child {
  const name = `${lib} ${role}`;
  const child = spawn(process.execPath, ['-r', path.join(ROOT, 'test/support/ts-register.js'), path.join(__dirname, 'child.ts'), lib, role, url], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  live.add(child);
  let out = '';
  let closed = false;
  const listeners = new Set<() => void>();
  child.stdout!.on('data', (d) => {
    out += d;
    for (const l of [...listeners]) l();
  });
  child.stderr!.on('data', (d) => (out += d));
  // 'close', not 'exit': by then every line it wrote has been read.
  const exited = new Promise<number | null>((resolve) =>
    child.on('close', (code, signal) => {
      closed = true;
      live.delete(child);
      for (const l of [...listeners]) l();
      resolve(signal ? null : code);
    }),
  );
  return {
    name,
    exited,
    output: () => out,
    kill: (signal = 'SIGKILL') => void child.kill(signal),
    line(marker, timeoutMs = 60_000) {
      return new Promise<string>((resolve, reject) => {
        const check = () => {
          const found = out.split('\n').find((l) => l.startsWith(marker));
          const failed = out.split('\n').find((l) => l.startsWith('FAILED'));
          if (found || failed || closed) {
            listeners.delete(check);
            clearTimeout(timer);
            if (found) resolve(found);
            else reject(new Error(`${name}: no "${marker}" line (${failed ? 'it failed' : 'it exited'}):\n${out}`));
          }
        };
        const timer = setTimeout(() => {
          listeners.delete(check);
          reject(new Error(`${name}: no "${marker}" line within ${timeoutMs} ms:\n${out}`));
        }, timeoutMs);
        listeners.add(check);
        check();
      });
    },
    async stop(graceMs = 10_000) {
      if (closed) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Polls `done` every 100 ms until it returns true; throws `what` after `timeoutMs`. */
export async function waitUntil(what: string, timeoutMs: number, done: () => Promise<boolean>): Promise<number> {
  const started = Date.now();
  for (;;) {
    if (await done()) return Date.now() - started;
    if (Date.now() - started > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
