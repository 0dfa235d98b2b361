import { Inject, Injectable, Logger } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper';
import { TASK_HANDLER_METADATA, WORKFLOW_METADATA, type TaskHandlerMetadata } from '../decorators/task-handler.decorator';
import { HandlerConfigurationError, InvalidOptionsError } from '../errors';
import { CONNECTION_NAME, DEFAULT_CONNECTION } from '../pg-queue.connections';
import { TaskHandlerRegistry, checkDecoratorOptions, decoratorPath } from './task-handler.registry';

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
    /** The instance explored for each class with handlers, and the provider that gave it. */
    const classes = new Map<unknown, { instance: object; wrapper: InstanceWrapper }>();
    for (const wrapper of this.discovery.getProviders()) {
      const instance = wrapper.instance as Record<string, unknown> | undefined;
      if (!instance || typeof instance !== 'object' || !wrapper.isDependencyTreeStatic()) continue;
      const prototype = Object.getPrototypeOf(instance);
      if (!prototype) continue;
      const handlers = this.scanner.getAllMethodNames(prototype).flatMap((methodName) => {
        const method = prototype[methodName];
        const meta: TaskHandlerMetadata | undefined =
          typeof method === 'function' ? Reflect.getMetadata(TASK_HANDLER_METADATA, method) : undefined;
        return meta ? [{ methodName, method, meta }] : [];
      });
      if (handlers.length === 0) continue;
      const first = classes.get(instance.constructor);
      if (first?.instance === instance) continue; // an alias (useExisting) of a provider explored already
      if (first) throw registeredTwice(first.wrapper, wrapper, instance.constructor.name, handlers[0]);
      classes.set(instance.constructor, { instance, wrapper });
      for (const { methodName, method, meta } of handlers) {
        const name = `${instance.constructor.name}.${methodName}`;
        checkDecoratorOptions(meta.queue, meta.options, name);
        const connection = meta.options.connection ?? DEFAULT_CONNECTION;
        if (!connections.has(connection)) {
          const known = [...connections].map((c) => JSON.stringify(c)).join(', ');
          throw new HandlerConfigurationError(`${decoratorPath(meta.queue)}.connection`, `no PgQueueModule registration is named ${JSON.stringify(connection)} (registered: ${known})`, name);
        }
        if (connection !== this.connection) continue;
        const workflow = Reflect.getMetadata(WORKFLOW_METADATA, method) === true;
        const registered = this.registry.register(meta.queue, name, method.bind(instance), meta.options, workflow);
        const where = this.connection === DEFAULT_CONNECTION ? '' : ` on connection "${this.connection}"`;
        this.logger.log(`${workflow ? 'workflow' : 'handler'} ${name} → "${meta.queue}"${where} (${workflow ? 'journaled' : registered.options.mode}${registered.sandbox ? `, sandboxed in a ${registered.sandbox.kind}` : ''}, concurrency ${registered.options.concurrency})`);
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

/**
 * One class provided twice (in two modules, or under two tokens): two instances, so every handler
 * of the class would be found twice. Said as such, with where each registration is.
 */
function registeredTwice(first: InstanceWrapper, second: InstanceWrapper, className: string, handler: { methodName: string; meta: TaskHandlerMetadata }): HandlerConfigurationError {
  const token = (w: InstanceWrapper) => (typeof w.token === 'function' ? w.token.name : String(w.token));
  const [a, b] = [first.host?.name, second.host?.name];
  const where =
    a === undefined || b === undefined ? 'as two providers' : a === b ? `in ${a}, as ${token(first)} and as ${token(second)}` : `in ${a} and in ${b}`;
  return new HandlerConfigurationError(
    decoratorPath(handler.meta.queue),
    `${className} is registered twice, ${where}: each registration is an instance of its own, whose handlers would all run; ` +
      'provide it in one module (and export it from there if other modules inject it)',
    `${className}.${handler.methodName}`,
  );
}
