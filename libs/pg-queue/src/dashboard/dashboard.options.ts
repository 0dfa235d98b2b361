import { Logger, type CanActivate, type Type } from '@nestjs/common';
import { createHmac, randomBytes } from 'node:crypto';
import { InvalidOptionsError } from '../errors';
import { DEFAULT_CONNECTION, validateConnectionName } from '../pg-queue.connections';
import { rejectUnknownOptions } from '../option-keys';

/**
 * Who may open the dashboard: a Nest guard class (built by Nest's injector, so it may inject your
 * services), a guard instance, or `'none'` for a dashboard open to anyone who can reach the
 * server (say it out loud: there is no default).
 */
export type DashboardGuard = Type<CanActivate> | CanActivate | 'none';

/** `PgQueueDashboardModule.forRoot(options)` / the result of `forRootAsync`'s factory. */
export interface PgQueueDashboardOptions {
  /** Required. Runs before every route, pages, assets and actions alike; a refusal is a 403 with no data. */
  guard: DashboardGuard;
  /** Hide the action buttons and refuse every action POST (403). Default false. */
  readOnly?: boolean;
  /**
   * Derives the form token from this secret (at least 16 characters) instead of a random one per
   * process: set the same value on every instance when a balancer may send a form's POST to
   * another instance than the page's GET.
   */
  csrfSecret?: string;
  /** The PgQueueModule registration whose queues it shows (see pg-queue.connections.ts). Default: the default one. */
  connection?: string;
}

/** Options that shape the module itself, given next to the others in forRoot and forRootAsync. */
export interface PgQueueDashboardExtras {
  /** Where the dashboard is served (under the app's global prefix, if any). Default '/queues'. */
  path: string;
}

export interface ResolvedDashboardOptions {
  guard: Type<CanActivate> | CanActivate | null;
  readOnly: boolean;
  /** The token every action form carries and every action POST must return. */
  csrfToken: string;
  connection: string;
}

const OPTION_KEYS = Object.keys({ guard: true, readOnly: true, csrfSecret: true, connection: true } satisfies Record<keyof PgQueueDashboardOptions, true>);
/** The module's own options (extras), which Nest takes out of forRoot's before these are resolved. */
const EXTRAS = Object.fromEntries(
  Object.keys({ path: true } satisfies Record<keyof PgQueueDashboardExtras, true>).map((key) => [
    key,
    'an option of PgQueueDashboardModule.forRoot itself: in forRootAsync it goes next to useFactory, not in what the factory returns',
  ]),
);

export const DEFAULT_DASHBOARD_PATH = '/queues';
const PATH = /^(\/[A-Za-z0-9._~-]+)*$/;

/** The route path, normalised to a leading slash and no trailing one ('' for the app's root). */
export function dashboardPath(path: unknown): string {
  if (path === undefined) return DEFAULT_DASHBOARD_PATH;
  if (typeof path !== 'string') throw new InvalidOptionsError('dashboard.path', 'expected a string such as "/queues"');
  const normalised = `/${path.trim()}`.replace(/\/{2,}/g, '/').replace(/\/$/, '');
  if (!PATH.test(normalised)) {
    throw new InvalidOptionsError('dashboard.path', `expected path segments of [A-Za-z0-9._~-] (no route parameters or wildcards), got ${JSON.stringify(path)}`);
  }
  return normalised;
}

export function resolveDashboardOptions(options: PgQueueDashboardOptions): ResolvedDashboardOptions {
  if (!options || typeof options !== 'object') throw new InvalidOptionsError('dashboard', 'expected an object with a guard');
  rejectUnknownOptions(
    options,
    OPTION_KEYS,
    (key, reason) => {
      throw new InvalidOptionsError(`dashboard.${key}`, reason);
    },
    EXTRAS,
  );
  const { guard, readOnly, csrfSecret } = options;
  const connection = validateConnectionName(options.connection ?? DEFAULT_CONNECTION, 'dashboard.connection');
  const isClass = typeof guard === 'function' && typeof (guard as Type<CanActivate>).prototype?.canActivate === 'function';
  const isInstance = typeof guard === 'object' && guard !== null && typeof (guard as CanActivate).canActivate === 'function';
  if (guard !== 'none' && !isClass && !isInstance) {
    throw new InvalidOptionsError(
      'dashboard.guard',
      "required: a CanActivate guard class or instance, or 'none' for a dashboard open to everyone who can reach the server",
    );
  }
  if (readOnly !== undefined && typeof readOnly !== 'boolean') throw new InvalidOptionsError('dashboard.readOnly', 'expected a boolean');
  if (csrfSecret !== undefined && (typeof csrfSecret !== 'string' || csrfSecret.length < 16)) {
    throw new InvalidOptionsError('dashboard.csrfSecret', 'expected a string of at least 16 characters');
  }
  if (guard === 'none') {
    new Logger('PgQueueDashboard').warn("guard: 'none': the queue dashboard is open to everyone who can reach this server");
  }
  return {
    guard: guard === 'none' ? null : guard,
    readOnly: readOnly ?? false,
    csrfToken: csrfSecret
      ? createHmac('sha256', csrfSecret).update('pg-queue dashboard form token').digest('base64url')
      : randomBytes(32).toString('base64url'),
    connection,
  };
}
