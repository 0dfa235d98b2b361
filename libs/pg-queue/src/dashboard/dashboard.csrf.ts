import { ForbiddenException, Inject, Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { timingSafeEqual } from 'node:crypto';
import type { ResolvedDashboardOptions } from './dashboard.options';
import { header, type DashboardRequest } from './dashboard.request';
import { DASHBOARD_OPTIONS } from './dashboard.tokens';

/** The form field that carries the token. */
export const CSRF_FIELD = '_csrf';

/**
 * Guards every action POST, after the access guard let the request in:
 * 1. read-only dashboards take no actions;
 * 2. a browser that says the request comes from another origin is refused: `Sec-Fetch-Site`
 *    other than `same-origin` (sent by every current browser, and then decisive), or, without it,
 *    an `Origin` whose host is not this request's `Host` (older browsers; `Origin: null` too,
 *    which is why the pages' referrer policy is `same-origin`: under `no-referrer` a browser
 *    sends `Origin: null` even from the dashboard's own forms);
 * 3. the form must carry this process's token (`_csrf`), which only pages of the dashboard
 *    contain: another site can make the browser send a POST but cannot read a page to learn it.
 * Any failure is a 403 and the action does not run.
 */
@Injectable()
export class DashboardActionGuard implements CanActivate {
  private readonly token: Buffer;

  constructor(@Inject(DASHBOARD_OPTIONS) private readonly options: ResolvedDashboardOptions) {
    this.token = Buffer.from(options.csrfToken);
  }

  canActivate(context: ExecutionContext): boolean {
    if (this.options.readOnly) throw new ForbiddenException('read-only dashboard');
    const req = context.switchToHttp().getRequest<DashboardRequest>();
    if (!sameOrigin(req)) throw new ForbiddenException('cross-site request');
    const body = req.body;
    const sent = body && typeof body === 'object' ? (body as Record<string, unknown>)[CSRF_FIELD] : undefined;
    if (typeof sent !== 'string' || !this.matches(sent)) throw new ForbiddenException('missing or wrong form token');
    return true;
  }

  private matches(sent: string): boolean {
    const given = Buffer.from(sent);
    return given.length === this.token.length && timingSafeEqual(given, this.token);
  }
}

/** False when the browser says, or the Origin shows, that the request was made by another site or origin. */
export function sameOrigin(req: DashboardRequest): boolean {
  const site = header(req, 'sec-fetch-site');
  if (site !== undefined) return site === 'same-origin';
  const origin = header(req, 'origin');
  if (origin === undefined) return true;
  const host = header(req, 'x-forwarded-host')?.split(',')[0].trim() ?? header(req, 'host');
  try {
    return host !== undefined && new URL(origin).host === host.toLowerCase();
  } catch {
    return false; // "null" (sandboxed frames, some redirects) or garbage
  }
}
