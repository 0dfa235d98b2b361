import { Inject, Injectable, Logger } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { TASK_HANDLER_METADATA, type TaskHandlerMetadata } from '../decorators/task-handler.decorator';
import { HandlerConfigurationError, InvalidOptionsError } from '../errors';
import { CONNECTION_NAME, DEFAULT_CONNECTION } from '../pg-queue.connections';
import { TaskHandlerRegistry, decoratorPath } from './task-handler.registry';

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
    /** This registration's name: it takes the handlers whose `connection` is this. */
    @Inject(CONNECTION_NAME) private readonly connection: string,
  ) {}

  explore(): void {
    if (this.explored) return;
    this.explored = true;
    const connections = this.registrations();
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
        const connection = meta.options.connection ?? DEFAULT_CONNECTION;
        if (!connections.has(connection)) {
          const known = [...connections].map((c) => JSON.stringify(c)).join(', ');
          throw new HandlerConfigurationError(`${decoratorPath(meta.queue)}.connection`, `no PgQueueModule registration is named ${JSON.stringify(connection)} (registered: ${known})`, name);
        }
        if (connection !== this.connection) continue;
        const registered = this.registry.register(meta.queue, name, method.bind(instance), meta.options);
        const where = this.connection === DEFAULT_CONNECTION ? '' : ` on connection "${this.connection}"`;
        this.logger.log(`handler ${name} → "${meta.queue}"${where} (${registered.options.mode}, concurrency ${registered.options.concurrency})`);
      }
    }
  }

  /** The names of every PgQueueModule registration in the app (each provides CONNECTION_NAME). */
  private registrations(): Set<string> {
    const names = new Set<string>();
    for (const wrapper of this.discovery.getProviders()) {
      if (wrapper.token !== CONNECTION_NAME) continue;
      const name = wrapper.instance as string;
      if (names.has(name)) throw new InvalidOptionsError('connection', `two PgQueueModule registrations are named ${JSON.stringify(name)}`, 'PgQueueModule.forRoot');
      names.add(name);
    }
    return names;
  }
}
