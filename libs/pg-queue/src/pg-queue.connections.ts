import { Inject } from '@nestjs/common';
import { TaskQueue } from './client/task-queue.service';
import { InvalidOptionsError, PgQueueError } from './errors';

/**
 * Several PgQueueModule registrations in one app, each with its own Prisma client (and so its own
 * database) and a name: `PgQueueModule.forRoot({ connection: 'billing', prisma: billingPrisma })`.
 * Handlers say which one runs them (`@TaskHandler('billing.charge', { connection: 'billing' })`),
 * and `@InjectTaskQueue('billing')` gives that registration's TaskQueue. The registration without
 * a name is 'default': its TaskQueue is the `TaskQueue` class token, as in a one-database app.
 */
export const DEFAULT_CONNECTION = 'default';

/** DI token of a registration's name (module-scoped: every registration provides its own). */
export const CONNECTION_NAME = Symbol('PG_QUEUE_CONNECTION_NAME');

const CONNECTION = /^[A-Za-z][A-Za-z0-9_.-]{0,62}$/;

export function validateConnectionName(name: unknown, option = 'connection', where?: string): string {
  if (typeof name !== 'string' || !CONNECTION.test(name)) {
    throw new InvalidOptionsError(option, `expected a name of 1 to 63 letters, digits, '_', '.' or '-' starting with a letter, got ${JSON.stringify(name)}`, where);
  }
  return name;
}

/** The DI token of a registration's TaskQueue: the TaskQueue class for the default one. */
export function getTaskQueueToken(connection: string = DEFAULT_CONNECTION): typeof TaskQueue | string {
  return validateConnectionName(connection) === DEFAULT_CONNECTION ? TaskQueue : `PgQueue:TaskQueue:${connection}`;
}

/** Injects the TaskQueue of the registration named `connection` (default: the unnamed one). */
export function InjectTaskQueue(connection: string = DEFAULT_CONNECTION): ParameterDecorator & PropertyDecorator {
  return Inject(getTaskQueueToken(connection));
}

/**
 * A string token unique to one registration for its `what`: code outside the module (the testing
 * helpers, the dashboard) looks it up across the app (`strict: false`), where the class token
 * would be ambiguous once there are several registrations.
 */
export function registrationToken(connection: string, what: 'options' | 'orchestrator' | 'events'): string {
  return `PgQueue:${what}:${connection}`;
}

/**
 * What the registration named `connection` provides as `what`, looked up across the app; a
 * PgQueueError naming `user` (the module that needs it) when there is no such registration,
 * instead of Nest's injection error.
 */
export function findRegistration<T>(
  moduleRef: { get(token: string, options: { strict: false }): unknown },
  connection: string,
  what: 'options' | 'orchestrator' | 'events',
  user: string,
): T {
  let found: unknown;
  try {
    found = moduleRef.get(registrationToken(validateConnectionName(connection), what), { strict: false });
  } catch {
    found = undefined;
  }
  if (found === undefined || found === null) {
    const name = connection === DEFAULT_CONNECTION ? 'PgQueueModule (forRoot or forRootAsync, without a connection name)' : `PgQueueModule with connection '${connection}'`;
    throw new PgQueueError(`pg-queue: ${user} needs ${name} in the same app`);
  }
  return found as T;
}
