/**
 * What the dashboard reads from a request, typed structurally so that it needs no HTTP adapter's
 * types: Express (Nest's default) and Fastify requests both have these fields.
 */
export interface DashboardRequest {
  method?: string;
  /** Express: the URL as requested (`url` may have been rewritten by a mount). */
  originalUrl?: string;
  url?: string;
  headers: Record<string, string | string[] | undefined>;
  /** A form POST's fields, parsed by the app's body parser (Nest's default for Express). */
  body?: unknown;
}

/** One header's value (the first, if repeated). */
export function header(req: DashboardRequest, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/**
 * The dashboard's base path as this request reached it: the path without its last `depth`
 * segments (the route's own), so links keep a global prefix or a mount point. Repeated slashes
 * are folded, so that a link can never start with `//` (another host); `fallback` when the path
 * is not what the route implies.
 */
export function basePath(req: DashboardRequest, depth: number, fallback: string): string {
  let path: string;
  try {
    path = new URL(req.originalUrl ?? req.url ?? '/', 'http://dashboard.invalid').pathname;
  } catch {
    return fallback;
  }
  const segments = path.replace(/\/{2,}/g, '/').replace(/\/$/, '').split('/');
  if (segments.length - 1 < depth) return fallback;
  const base = segments.slice(0, segments.length - depth).join('/');
  return /^(\/[^/?#\s]+)*$/.test(base) ? base : fallback;
}
