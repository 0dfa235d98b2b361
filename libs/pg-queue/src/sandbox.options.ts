import { existsSync, statSync } from 'node:fs';
import { isAbsolute } from 'node:path';
import { HandlerConfigurationError } from './errors';
import { isOptionsObject, rejectUnknownOptions } from './option-keys';
import type { Task } from './types';

/**
 * `@TaskHandler(queue, { mode: 'lease', sandbox })`: the queue's tasks run in `module`, in a worker
 * thread or a child process of their own, not in the decorated method (whose body is not called).
 * See "Sandboxed handlers" in the README.
 */
export interface SandboxOptions {
  /**
   * Absolute path of a module Node can load as it is (plain or compiled JavaScript; CommonJS, or
   * an ES module): `require.resolve('./resize.worker')`. It exports the function as its default
   * export or as `handle` (see SandboxedHandler).
   */
  module: string;
  /**
   * 'thread' (default): a `node:worker_threads` Worker, cheap to start, in this process's memory.
   * 'process': a child Node process, for code that must not share the process (native addons that
   * are not thread-safe, memory it may leak, `process.chdir`).
   */
  kind?: 'thread' | 'process';
}

/** Sandbox options after validation. */
export interface ValidSandbox {
  module: string;
  kind: 'thread' | 'process';
}

/**
 * What a sandboxed handler gets instead of the in-process `ctx`: no Nest DI, no `enqueue` (there is
 * no transaction or attempt to add follow-ups to in another thread), no `heartbeat` (the main thread
 * keeps the lease by itself) and no `signal` (an aborted sandbox is terminated).
 */
export interface SandboxContext {
  /** As `ctx.progress`: sent to the main thread, which writes it (a value it refuses fails the attempt). */
  progress(value: unknown): void;
  /** As `ctx.log`. */
  log(line: string): void;
}

/**
 * The function a sandbox module exports: the task's fields (cloned: Dates stay Dates) and a minimal
 * context; what it returns (or the promise's value) is the task's result, cloned back. A thrown
 * error fails the attempt with its name and message; one named 'NonRetryableError' ends the task
 * dead, as the library's own class does in process.
 */
export type SandboxedHandler<P = unknown, R = unknown> = (task: Task<P>, ctx: SandboxContext) => R | Promise<R>;

const SANDBOX_KEYS = Object.keys({ module: true, kind: true } satisfies Record<keyof SandboxOptions, true>);

/**
 * Checks a handler's `sandbox` at startup. The module must exist now: a path that is wrong (a
 * relative one, a .ts source a build did not emit) would otherwise fail every task, one by one.
 */
export function validateSandbox(pathOf: string, value: unknown, where: string): ValidSandbox {
  const fail = (option: string, reason: string): never => {
    throw new HandlerConfigurationError(option === '' ? pathOf : `${pathOf}.${option}`, reason, where);
  };
  if (!isOptionsObject(value)) return fail('', `expected { module, kind? }, got ${JSON.stringify(value)}`);
  rejectUnknownOptions(value, SANDBOX_KEYS, fail);
  const { module, kind = 'thread' } = value as SandboxOptions;
  if (typeof module !== 'string' || !isAbsolute(module)) {
    fail('module', `expected an absolute path (e.g. require.resolve('./resize.worker')), got ${JSON.stringify(module)}`);
  }
  if (!existsSync(module) || !statSync(module).isFile()) fail('module', `no such file: ${module}`);
  if (kind !== 'thread' && kind !== 'process') fail('kind', `expected 'thread' or 'process', got ${JSON.stringify(kind)}`);
  return { module, kind };
}
