import { Inject, Injectable } from '@nestjs/common';
import { HandlerConfigurationError, InvalidScheduleError } from '../errors';
import { isOptionsObject, rejectUnknownOptions } from '../option-keys';
import { assertLimiterKnown } from '../limiter.options';
import { HANDLER_OPTION_KEYS, type HandlerOptions, type ResolvedModuleOptions, queueOptionsPath, resolveHandlerOptions } from '../pg-queue.options';
import { RESOLVED_OPTIONS } from '../pg-queue.tokens';
import { validateSandbox, type ValidSandbox } from '../sandbox.options';
import type { TaskHandlerOptions } from '../decorators/task-handler.decorator';
import { validateSchedule, type ValidSchedule } from '../schedules/schedule.definition';
import type { TaskHandlerFn } from '../types';

export interface RegisteredHandler {
  queue: string;
  /** `ClassName.method`, for messages and logs. */
  name: string;
  options: HandlerOptions;
  handle: TaskHandlerFn;
  schedule: ValidSchedule | null;
  /** A @Workflow method: `handle` takes (input, WorkflowContext) and runs under workflow/workflow.runner.ts. */
  workflow: boolean;
  /** Tasks run in this module in a worker thread or child process, not in `handle` (see worker/sandbox.pool.ts). */
  sandbox?: ValidSandbox | null;
}

/** Where a handler's decorator options are, as error paths name it: `@TaskHandler("mail.send")`. */
export function decoratorPath(queue: string): string {
  return `@TaskHandler(${JSON.stringify(queue)})`;
}

/** What `@TaskHandler` takes: the handler settings, and schedule, connection and sandbox. */
const DECORATOR_OPTION_KEYS: string[] = [...HANDLER_OPTION_KEYS, ...(['schedule', 'connection', 'sandbox'] satisfies (keyof TaskHandlerOptions)[])];

/**
 * Refuses a `@TaskHandler` option that does not exist (a misspelling would leave the default in
 * force); `where` is the handler method. Checked before the handler is routed to its connection.
 */
export function checkDecoratorOptions(queue: string, options: TaskHandlerOptions, where: string): void {
  const path = decoratorPath(queue);
  if (!isOptionsObject(options)) {
    throw new HandlerConfigurationError(path, `expected an object of handler settings, got ${JSON.stringify(options)}`, where);
  }
  rejectUnknownOptions(options, DECORATOR_OPTION_KEYS, (key, reason) => {
    throw new HandlerConfigurationError(`${path}.${key}`, reason, where);
  });
}

/**
 * A sandbox runs only lease-mode handlers: a transactional handler's writes go through the claim's
 * transaction, whose connection cannot cross to another thread or process, and a workflow's steps
 * are journaled through this process's context. The mode is checked as resolved (it may come from
 * `queues[q]` or `handlerDefaults`), so the error names where it was set.
 */
function sandboxOf(path: string, sandbox: unknown, options: HandlerOptions, workflow: boolean, name: string): ValidSandbox {
  if (workflow) {
    throw new HandlerConfigurationError(`${path}.sandbox`, "a @Workflow cannot run in a sandbox (its steps need this process's context); sandbox a lease-mode task it enqueues instead", name);
  }
  if (options.mode !== 'lease') {
    throw new HandlerConfigurationError(
      `${path}.sandbox`,
      `a sandbox runs lease-mode handlers only, and this one is transactional (its writes need the claim's transaction, which cannot cross to a worker thread or process): add mode: 'lease'`,
      name,
    );
  }
  return validateSandbox(`${path}.sandbox`, sandbox, name);
}

/**
 * The handlers this process runs, by queue: a plain map users may inject to see what is registered.
 * Settings per queue are layered: library defaults < module handlerDefaults < module queues[q] <
 * decorator options.
 */
@Injectable()
export class TaskHandlerRegistry {
  private readonly handlers = new Map<string, RegisteredHandler>();

  constructor(@Inject(RESOLVED_OPTIONS) private readonly options: ResolvedModuleOptions) {}

  register(queue: string, name: string, handle: TaskHandlerFn, decoratorOptions: TaskHandlerOptions, workflow = false): RegisteredHandler {
    const path = decoratorPath(queue);
    const existing = this.handlers.get(queue);
    if (existing) throw new HandlerConfigurationError(path, `queue "${queue}" has two handlers: ${existing.name} and ${name}`, name);
    const { schedule, connection: _connection, sandbox, ...handlerOptions } = decoratorOptions;
    const options = resolveHandlerOptions(path, this.baseOptions(queue), handlerOptions, name);
    assertLimiterKnown(path, options, this.options.limiters, name);
    const registered: RegisteredHandler = {
      queue,
      name,
      options,
      handle,
      schedule: schedule ? validateSchedule({ ...schedule, queue }, `${path}.schedule`, name) : null,
      workflow,
      sandbox: sandbox === undefined ? null : sandboxOf(path, sandbox, options, workflow, name),
    };
    this.handlers.set(queue, registered);
    return registered;
  }

  get(queue: string): RegisteredHandler | undefined {
    return this.handlers.get(queue);
  }

  all(): RegisteredHandler[] {
    return [...this.handlers.values()];
  }

  /** Every schedule declared in this process: on handlers and in the module's `schedules`. */
  schedules(): ValidSchedule[] {
    const declared = [
      ...this.all().flatMap((h) => (h.schedule ? [{ schedule: h.schedule, path: `${decoratorPath(h.queue)}.schedule`, where: h.name }] : [])),
      ...this.options.schedules.map((s, i) => ({ schedule: validateSchedule(s, `schedules[${i}]`), path: `schedules[${i}]`, where: undefined })),
    ];
    const names = new Set<string>();
    for (const { schedule, path, where } of declared) {
      if (names.has(schedule.name)) throw new InvalidScheduleError(`${path}.name`, `two schedules are named "${schedule.name}"`, where);
      names.add(schedule.name);
    }
    return declared.map((d) => d.schedule);
  }

  /** Effective settings of a queue, whether or not this process handles it. */
  optionsFor(queue: string): HandlerOptions {
    return this.handlers.get(queue)?.options ?? this.baseOptions(queue);
  }

  private baseOptions(queue: string): HandlerOptions {
    const over = this.options.queues[queue];
    return over ? resolveHandlerOptions(queueOptionsPath(queue), this.options.handlerDefaults, over) : this.options.handlerDefaults;
  }
}
