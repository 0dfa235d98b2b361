import { spawn, type ChildProcess } from 'node:child_process';
import * as path from 'node:path';

const ROOT = path.resolve(__dirname, '..', '..');

/** Every fixture process not yet exited, for `killFixtureProcesses` (a spec's afterAll). */
const live = new Set<FixtureProcess>();

/** SIGKILLs every fixture process this test file started that is still running. */
export async function killFixtureProcesses(): Promise<void> {
  await Promise.all([...live].map((p) => p.kill()));
}

/** A test fixture (test/fixtures/*.ts) running in a child process of its own. */
export interface FixtureProcess {
  readonly child: ChildProcess;
  /** Resolves with the first stdout line starting with `marker`; rejects if the process exits first or after `timeoutMs`. */
  line(marker: string, timeoutMs?: number): Promise<string>;
  /** Whether a stdout line starting with `marker` was printed already. */
  saw(marker: string): boolean;
  /** Resolves when the process is gone: its exit code, or the signal that ended it. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  readonly hasExited: boolean;
  /** Everything it printed so far (stdout then stderr), for failure messages. */
  output(): string;
  /** SIGKILL, then wait for the exit. */
  kill(): Promise<void>;
}

/**
 * Runs `test/fixtures/<fixture>.ts` through the SWC register hook (no build step), with `args`
 * as its argv. stdout lines are the fixture's protocol (READY, ...); stderr is kept for diagnostics.
 * Its stdin is a pipe from this process: fixtures that run until killed exit when it closes, so
 * none outlives a test run that died.
 */
export function startFixtureProcess(fixture: string, args: string[], env: NodeJS.ProcessEnv = {}): FixtureProcess {
  const child = spawn(
    process.execPath,
    ['-r', path.join(ROOT, 'test/support/ts-register.js'), path.join(ROOT, 'test/fixtures', `${fixture}.ts`), ...args],
    { cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, ...env } },
  );
  let out = '';
  let err = '';
  let gone = false;
  const waiters = new Set<{ marker: string; resolve: (line: string) => void }>();
  const find = (marker: string) => out.split('\n').find((l) => l.startsWith(marker));
  child.stdout!.setEncoding('utf8').on('data', (d: string) => {
    out += d;
    for (const w of [...waiters]) {
      const found = find(w.marker);
      if (found !== undefined) {
        waiters.delete(w);
        w.resolve(found);
      }
    }
  });
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    // Keep the tail only: a worker that logs a reconnect loop must not fill the test's memory.
    err = (err + d).slice(-20_000);
  });
  child.stdin!.on('error', () => undefined); // EPIPE once the child is gone
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => {
      gone = true;
      live.delete(handle);
      child.stdin!.destroy();
      resolve({ code, signal });
    }),
  );
  const output = () => `--- stdout ---\n${out.slice(-5000)}\n--- stderr ---\n${err}`;
  const handle: FixtureProcess = {
    child,
    exited,
    get hasExited() {
      return gone;
    },
    output,
    saw: (marker) => find(marker) !== undefined,
    line(marker, timeoutMs = 60_000) {
      const found = find(marker);
      if (found !== undefined) return Promise.resolve(found);
      return new Promise<string>((resolve, reject) => {
        const w = { marker, resolve: (l: string) => (clearTimeout(timer), resolve(l)) };
        const timer = setTimeout(() => {
          waiters.delete(w);
          reject(new Error(`fixture ${fixture} printed no "${marker}" within ${timeoutMs} ms\n${output()}`));
        }, timeoutMs);
        waiters.add(w);
        void exited.then(() =>
          // Let the last stdout chunk arrive before giving up on the marker.
          setTimeout(() => {
            if (!waiters.delete(w)) return;
            clearTimeout(timer);
            reject(new Error(`fixture ${fixture} exited before "${marker}"\n${output()}`));
          }, 200),
        );
      });
    },
    async kill() {
      if (!gone) child.kill('SIGKILL');
      await exited;
    },
  };
  live.add(handle);
  return handle;
}

/** For fixtures that run until killed: exit when the parent test process is gone (stdin closes). */
export function exitWithParent(): void {
  process.stdin.on('end', () => process.exit(0));
  process.stdin.on('close', () => process.exit(0));
  process.stdin.resume();
}
