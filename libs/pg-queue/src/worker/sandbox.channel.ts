import { spawn, type ChildProcess } from 'node:child_process';
import { Worker } from 'node:worker_threads';
import type { ValidSandbox } from '../sandbox.options';
import type { Task } from '../types';

/** An error as it crosses from a sandbox: name and message kept whatever its class (see remoteError in sandbox.pool.ts). */
export interface RemoteError {
  name: string;
  message: string;
  stack?: string;
}

/** What a sandbox says while it runs a task; `fatal`: a child process's uncaught exception, its exit follows. */
export type SandboxMessage =
  | { type: 'progress'; value: unknown }
  | { type: 'log'; line: unknown }
  | { type: 'done'; value: unknown }
  | { type: 'error'; error: RemoteError }
  | { type: 'fatal'; error: RemoteError };

/**
 * The code a sandbox runs: loads the user's module on its first task, then runs one task per 'run'
 * message. Given inline (a Worker's `eval`, a child's `-e`) rather than as a file of the package,
 * so it needs no asset copied by a build and cannot be resolved to a stale path. Plain CommonJS:
 * it runs in a bare Node context, without the app's loaders.
 */
const BOOT = String.raw`'use strict';
const threads = require('node:worker_threads');
const port = threads.isMainThread ? null : threads.parentPort;
const modulePath = port ? threads.workerData.module : process.env.PG_QUEUE_SANDBOX_MODULE;
const send = (m) => (port ? port.postMessage(m) : process.send(m));
const errorOf = (e) => e instanceof Error ? { name: e.name, message: e.message, stack: e.stack } : { name: 'Error', message: typeof e === 'string' ? e : String(e) };
let handler = null;
async function load() {
  let m;
  try { m = require(modulePath); }
  catch (e) { if (!e || e.code !== 'ERR_REQUIRE_ESM') throw e; m = await import(require('node:url').pathToFileURL(modulePath).href); }
  const pick = (x) => typeof x === 'function' ? x : x && typeof x.default === 'function' ? x.default : x && typeof x.handle === 'function' ? x.handle : null;
  const fn = pick(m) || pick(m && m.default);
  if (!fn) throw new Error('pg-queue sandbox: ' + modulePath + ' exports no function (expected a default export or one named "handle")');
  return fn;
}
const ctx = { progress(value) { send({ type: 'progress', value }); }, log(line) { send({ type: 'log', line }); } };
async function run(task) {
  let value;
  try {
    handler = handler || (await load());
    value = await handler(task, ctx);
  } catch (e) {
    send({ type: 'error', error: errorOf(e) });
    return;
  }
  try { send({ type: 'done', value }); }
  catch (e) { send({ type: 'error', error: { name: 'NonRetryableError', message: 'the sandbox returned a value that cannot be sent back: ' + (e && e.message) } }); }
}
const onMessage = (m) => { if (m && m.type === 'run') run(m.task); };
if (port) port.on('message', onMessage);
else {
  process.on('message', onMessage);
  process.on('disconnect', () => process.exit(0)); // the app is gone: do not linger
  process.on('uncaughtException', (e) => {
    setTimeout(() => process.exit(70), 1000);
    try { process.send({ type: 'fatal', error: errorOf(e) }, () => process.exit(70)); } catch { process.exit(70); }
  });
}
`;

/** One sandbox, thread or process, as the pool sees it. */
export interface SandboxChannel {
  /** Sends the task; the sandbox keeps the app's process alive until `idle()` (as work in process would). */
  run(task: Task): void;
  /** Between tasks, an idle sandbox must not keep the app alive: its lifecycle (app.close) ends it. */
  idle(): void;
  /** Set by the pool for each task it runs, and while idle. */
  onMessage: (message: SandboxMessage) => void;
  /** The sandbox ended (crashed, exited, or was terminated); `why` says how. Called once. */
  onExit: (why: string) => void;
  /** Ends the sandbox at once, even in the middle of a CPU-bound loop; resolves once it is gone. */
  terminate(): Promise<void>;
}

export function startSandbox(sandbox: ValidSandbox): SandboxChannel {
  return sandbox.kind === 'thread' ? new ThreadChannel(sandbox.module) : new ProcessChannel(sandbox.module);
}

/** Shared by both kinds: onExit is told once, with the crash's own words when there were any. */
abstract class BaseChannel implements SandboxChannel {
  onMessage: (message: SandboxMessage) => void = () => undefined;
  onExit: (why: string) => void = () => undefined;
  protected crash: string | null = null;
  private exited = false;
  protected exited$: Promise<void>;
  private markExited!: () => void;

  constructor() {
    this.exited$ = new Promise((resolve) => (this.markExited = resolve));
  }

  abstract run(task: Task): void;
  abstract idle(): void;
  abstract terminate(): Promise<void>;

  protected ended(how: string): void {
    if (this.exited) return;
    this.exited = true;
    this.markExited();
    this.onExit(this.crash ?? how);
  }
}

/** A Worker: `terminate()` stops its JavaScript at once, wherever it is. */
class ThreadChannel extends BaseChannel {
  private readonly worker: Worker;

  constructor(module: string) {
    super();
    // The app's execArgv and env are inherited (Worker's defaults); its stdout and stderr go to the app's.
    this.worker = new Worker(BOOT, { eval: true, workerData: { module } });
    this.worker.unref();
    this.worker.on('message', (m: SandboxMessage) => this.onMessage(m));
    this.worker.on('error', (e: Error) => (this.crash ??= `uncaught ${e.name}: ${e.message}`)); // 'exit' follows
    this.worker.on('messageerror', (e: Error) => (this.crash ??= `a message could not be read: ${e.message}`));
    this.worker.on('exit', (code: number) => this.ended(`the worker thread exited with code ${code}`));
  }

  run(task: Task): void {
    this.worker.ref();
    this.worker.postMessage({ type: 'run', task });
  }

  idle(): void {
    this.worker.unref();
  }

  async terminate(): Promise<void> {
    await this.worker.terminate().catch(() => undefined);
    await this.exited$;
  }
}

/**
 * A child Node process with an IPC channel: what `child_process.fork` makes, spawned directly so
 * that the bootstrap can be inline (fork takes a file). `advanced` serialization is the structured
 * clone of threads (Dates, Maps, typed arrays cross as they are).
 */
class ProcessChannel extends BaseChannel {
  private readonly child: ChildProcess;

  constructor(module: string) {
    super();
    this.child = spawn(process.execPath, [...inheritedExecArgv(), '-e', BOOT], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      serialization: 'advanced',
      env: { ...process.env, PG_QUEUE_SANDBOX_MODULE: module },
    });
    this.idle();
    this.child.on('message', (m: SandboxMessage) => {
      if (m.type === 'fatal') this.crash ??= `uncaught ${m.error.name}: ${m.error.message}`;
      else this.onMessage(m);
    });
    this.child.on('error', (e: Error) => {
      this.crash ??= `the child process failed: ${e.message}`;
      if (this.child.pid === undefined) this.ended('the child process could not start'); // no 'exit' comes then
    });
    // 'close', not 'exit': it comes after the IPC channel closed, so after a last 'fatal' message.
    this.child.on('close', (code, signal) => this.ended(signal ? `the child process was killed by ${signal}` : `the child process exited with code ${code}`));
  }

  run(task: Task): void {
    this.child.ref();
    this.child.channel?.ref();
    try {
      this.child.send({ type: 'run', task });
    } catch (e) {
      this.crash ??= `the task could not be sent: ${(e as Error).message}`;
      this.child.kill('SIGKILL');
    }
  }

  idle(): void {
    this.child.unref();
    this.child.channel?.unref();
  }

  async terminate(): Promise<void> {
    // SIGKILL: a handler may trap SIGTERM, and a busy loop is what this must end.
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
    await this.exited$;
  }
}

/** As fork does: the app's node options, without an `-e` script of its own or a debugger port the child would fight for. */
function inheritedExecArgv(): string[] {
  const out: string[] = [];
  const args = process.execArgv;
  for (let i = 0; i < args.length; i++) {
    if (['-e', '--eval', '-p', '--print'].includes(args[i])) i++;
    else if (!/^--(inspect|debug)/.test(args[i])) out.push(args[i]);
  }
  return out;
}
