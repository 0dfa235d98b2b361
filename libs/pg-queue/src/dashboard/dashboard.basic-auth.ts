import { UnauthorizedException, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { InvalidOptionsError } from '../errors';

/** The realm a browser shows when it asks for the credentials. */
const REALM = 'pg-queue dashboard';

/**
 * A dashboard guard for an app without sign-in of its own: HTTP Basic auth. A browser asks for the
 * user and password once and sends them with every request (pages, stylesheet, links, forms), so
 * the dashboard works as it is. Serve it over HTTPS only: Basic auth sends the password with every
 * request, readable to anyone on the path.
 *
 * @example
 * ```ts
 * PgQueueDashboardModule.forRoot({ guard: dashboardBasicAuth({ user: 'ops', password: process.env.DASHBOARD_PASSWORD! }) })
 * ```
 */
export function dashboardBasicAuth(credentials: { user: string; password: string }): CanActivate {
  const { user, password } = credentials ?? ({} as { user?: unknown; password?: unknown });
  if (typeof user !== 'string' || user === '' || user.includes(':')) {
    throw new InvalidOptionsError('dashboardBasicAuth.user', 'expected a non-empty string without ":"');
  }
  if (typeof password !== 'string' || password.length < 12) {
    throw new InvalidOptionsError('dashboardBasicAuth.password', 'expected a string of at least 12 characters');
  }
  // Compared as digests: equal length, so timingSafeEqual applies and the length leaks nothing.
  const expected = digest(`${user}:${password}`);
  return {
    canActivate(context: ExecutionContext): boolean {
      const http = context.switchToHttp();
      const header = http.getRequest<IncomingMessage>().headers.authorization ?? '';
      const given = /^Basic ([A-Za-z0-9+/=]+)$/i.exec(header.trim())?.[1];
      if (given !== undefined && timingSafeEqual(digest(Buffer.from(given, 'base64').toString('utf8')), expected)) return true;
      http.getResponse<ServerResponse>().setHeader('WWW-Authenticate', `Basic realm="${REALM}", charset="UTF-8"`);
      throw new UnauthorizedException();
    },
  };
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}
