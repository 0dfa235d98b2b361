import { Inject, Injectable } from '@nestjs/common';
import { HandlerConfigurationError } from '../errors';
import { type HandlerOptions, type ResolvedModuleOptions, resolveHandlerOptions } from '../pg-queue.options';
import { RESOLVED_OPTIONS } from '../pg-queue.tokens';
import type { TaskHandlerFn } from '../types';

export interface RegisteredHandler {
  queue: string;
  /** `ClassName.method`, for messages and logs. */
  name: string;
  options: HandlerOptions;
  handle: TaskHandlerFn;
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

  register(queue: string, name: string, handle: TaskHandlerFn, decoratorOptions: Partial<HandlerOptions>): RegisteredHandler {
    const existing = this.handlers.get(queue);
    if (existing) {
      throw new HandlerConfigurationError(`pg-queue: queue "${queue}" has two handlers: ${existing.name} and ${name}`);
    }
    const options = resolveHandlerOptions(`${name} (queue "${queue}")`, this.baseOptions(queue), decoratorOptions);
    const registered = { queue, name, options, handle };
    this.handlers.set(queue, registered);
    return registered;
  }

  get(queue: string): RegisteredHandler | undefined {
    return this.handlers.get(queue);
  }

  all(): RegisteredHandler[] {
    return [...this.handlers.values()];
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
