import { Inject, Injectable } from '@nestjs/common';
import { HandlerConfigurationError } from '../errors';
import { type HandlerOptions, type ResolvedModuleOptions, resolveHandlerOptions } from '../pg-queue.options';
import { RESOLVED_OPTIONS } from '../pg-queue.tokens';
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

  register(queue: string, name: string, handle: TaskHandlerFn, decoratorOptions: TaskHandlerOptions): RegisteredHandler {
    const existing = this.handlers.get(queue);
    if (existing) {
      throw new HandlerConfigurationError(`pg-queue: queue "${queue}" has two handlers: ${existing.name} and ${name}`);
    }
    const { schedule, ...handlerOptions } = decoratorOptions;
    const where = `${name} (queue "${queue}")`;
    const options = resolveHandlerOptions(where, this.baseOptions(queue), handlerOptions);
    const registered = { queue, name, options, handle, schedule: schedule ? validateSchedule({ ...schedule, queue }, where) : null };
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
    const all = [
      ...this.all().flatMap((h) => (h.schedule ? [h.schedule] : [])),
      ...this.options.schedules.map((s, i) => validateSchedule(s, `schedules[${i}]`)),
    ];
    const names = new Set<string>();
    for (const s of all) {
      if (names.has(s.name)) throw new HandlerConfigurationError(`pg-queue: two schedules are named "${s.name}"`);
      names.add(s.name);
    }
    return all;
  }

  /** Effective settings of a queue, whether or not this process handles it. */
  optionsFor(queue: string): HandlerOptions {
    return this.handlers.get(queue)?.options ?? this.baseOptions(queue);
  }

  private baseOptions(queue: string): HandlerOptions {
    const over = this.options.queues[queue];
    return over ? resolveHandlerOptions(`queues.${queue}`, this.options.handlerDefaults, over) : this.options.handlerDefaults;
  }
}
