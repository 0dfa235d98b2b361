import { Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';

const COOKIE = 'pgq_dashboard';
let generated: string | undefined;

/** Whether the secret is this process's own random one (DASHBOARD_TOKEN unset). */
export function dashboardTokenGenerated(): boolean {
  return !process.env.DASHBOARD_TOKEN;
}

/** The example's dashboard secret: DASHBOARD_TOKEN, or a random one for this process when unset. */
export function dashboardToken(): string {
  return process.env.DASHBOARD_TOKEN || (generated ??= randomBytes(16).toString('hex'));
}

/**
 * The example app's guard for the queue dashboard: a shared secret, given once in the URL
 * (`/queues?token=…`, what the demo prints) and then kept in an HttpOnly, SameSite=Strict cookie,
 * so the dashboard's links, stylesheet and forms work without it. A real app puts its own
 * authentication here (its session, an SSO proxy's header, an admin role).
 */
@Injectable()
export class DashboardTokenGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const http = context.switchToHttp();
    const req = http.getRequest<IncomingMessage>();
    const token = dashboardToken();
    const fromUrl = new URL(req.url ?? '/', 'http://localhost').searchParams.get('token');
    if (fromUrl !== null && same(fromUrl, token)) {
      // Secure when the request came over HTTPS, here or at a TLS-terminating proxy in front.
      const secure = (req.socket as { encrypted?: boolean }).encrypted || req.headers['x-forwarded-proto'] === 'https' ? '; Secure' : '';
      http.getResponse<ServerResponse>().setHeader('Set-Cookie', `${COOKIE}=${token}; Path=/; HttpOnly; SameSite=Strict${secure}`);
      return true;
    }
    return same(cookie(req, COOKIE) ?? '', token);
  }
}

function cookie(req: IncomingMessage, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === name) return v.join('=');
  }
  return undefined;
}

function same(given: string, expected: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}
