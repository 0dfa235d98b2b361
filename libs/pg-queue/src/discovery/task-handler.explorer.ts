import { Injectable, Logger } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { TASK_HANDLER_METADATA, type TaskHandlerMetadata } from '../decorators/task-handler.decorator';
import { TaskHandlerRegistry } from './task-handler.registry';

/**
 * Finds every `@TaskHandler` method on the application's providers and registers it bound to its
 * instance. Only statically scoped providers qualify: a request-scoped provider has no instance
 * outside a request. Called by the orchestrator at module init, before the database is touched, so
 * a bad handler option fails startup with nothing opened.
 */
@Injectable()
export class TaskHandlerExplorer {
  private explored = false;

  private readonly logger = new Logger('PgQueue');

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly registry: TaskHandlerRegistry,
  ) {}

  explore(): void {
    if (this.explored) return;
    this.explored = true;
    for (const wrapper of this.discovery.getProviders()) {
      const instance = wrapper.instance as Record<string, unknown> | undefined;
      if (!instance || typeof instance !== 'object' || !wrapper.isDependencyTreeStatic()) continue;
      const prototype = Object.getPrototypeOf(instance);
      if (!prototype) continue;
      for (const methodName of this.scanner.getAllMethodNames(prototype)) {
        const method = prototype[methodName];
        const meta: TaskHandlerMetadata | undefined =
          typeof method === 'function' ? Reflect.getMetadata(TASK_HANDLER_METADATA, method) : undefined;
        if (!meta) continue;
        const name = `${instance.constructor.name}.${methodName}`;
        const registered = this.registry.register(meta.queue, name, method.bind(instance), meta.options);
        this.logger.log(`handler ${name} → "${meta.queue}" (${registered.options.mode}, concurrency ${registered.options.concurrency})`);
      }
    }
  }
}
