import path from 'node:path';
import { TaskHandlerRegistry } from './discovery/task-handler.registry';
import { HandlerConfigurationError, type InvalidOptionsError } from './errors';
import { DEFAULT_HANDLER_OPTIONS, type PgQueueModuleOptions, type ResolvedModuleOptions } from './pg-queue.options';
import type { TaskHandlerOptions } from './decorators/task-handler.decorator';

/** Any file will do: validation only checks that it is there (test/e2e/sandbox.spec.ts runs real ones). */
const MODULE = __filename;

/** Registers a handler of "img.resize" as the explorer would, in a registry with these module options. */
function register(options: TaskHandlerOptions, module: Partial<PgQueueModuleOptions> = {}, workflow = false) {
  // What register reads of the resolved module options (the rest is resolveModuleOptions's own test).
  const resolved = { handlerDefaults: DEFAULT_HANDLER_OPTIONS, queues: module.queues ?? {} } as unknown as ResolvedModuleOptions;
  const registry = new TaskHandlerRegistry(resolved);
  return registry.register('img.resize', 'Images.resize', async () => undefined, options, workflow);
}

/** The configuration error `register` throws for these options. */
function refusal(...args: Parameters<typeof register>): InvalidOptionsError {
  let error: unknown = null;
  try {
    register(...args);
  } catch (err) {
    error = err;
  }
  expect(error).toBeInstanceOf(HandlerConfigurationError);
  return error as InvalidOptionsError;
}

describe('the sandbox option of @TaskHandler', () => {
  it('takes a lease-mode handler, a thread by default', () => {
    expect(register({ mode: 'lease', sandbox: { module: MODULE } }).sandbox).toEqual({ module: MODULE, kind: 'thread' });
    expect(register({ mode: 'lease', sandbox: { module: MODULE, kind: 'process' } }).sandbox).toEqual({ module: MODULE, kind: 'process' });
    expect(register({ mode: 'lease' }).sandbox).toBeNull();
  });

  it('takes the mode from the module options too', () => {
    expect(register({ sandbox: { module: MODULE } }, { queues: { 'img.resize': { mode: 'lease' } } }).sandbox?.kind).toBe('thread');
  });

  it('refuses a transactional handler at startup, saying why and what to do', () => {
    const err = refusal({ sandbox: { module: MODULE } });
    expect(err.option).toBe('@TaskHandler("img.resize").sandbox');
    expect(err.message).toMatch(/lease-mode handlers only, and this one is transactional .*add mode: 'lease'/);
    expect(err.message).toContain('Images.resize');
  });

  it('refuses a workflow', () => {
    expect(refusal({ mode: 'lease', sandbox: { module: MODULE } }, {}, true).message).toMatch(/a @Workflow cannot run in a sandbox/);
  });

  it('refuses a relative or missing module, an unknown kind and a misspelt key', () => {
    const cases: [unknown, string, RegExp][] = [
      [{ module: './resize.worker' }, 'module', /expected an absolute path \(e\.g\. require\.resolve/],
      [{ module: path.join(path.dirname(MODULE), 'no-such-worker.js') }, 'module', /no such file: .*no-such-worker\.js/],
      [{ module: path.dirname(MODULE) }, 'module', /no such file/],
      [{ module: MODULE, kind: 'fork' }, 'kind', /expected 'thread' or 'process', got "fork"/],
      [{ modul: MODULE }, 'modul', /did you mean "module"/],
      ['resize.worker.js', '', /expected \{ module, kind\? \}/],
    ];
    for (const [sandbox, option, message] of cases) {
      const err = refusal({ mode: 'lease', sandbox: sandbox as never });
      expect(err.option).toBe(`@TaskHandler("img.resize").sandbox${option && `.${option}`}`);
      expect(err.message).toMatch(message);
    }
  });
});
