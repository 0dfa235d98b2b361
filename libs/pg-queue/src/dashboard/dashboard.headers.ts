import { applyDecorators, Header } from '@nestjs/common';

/**
 * Headers of every dashboard response. The policy allows the dashboard's own stylesheet and
 * nothing else: no script at all (the pages need none), no inline style, no frames around it
 * (clickjacking), forms that post only to this origin, no <base>. Pages are never cached (they
 * show live data behind a guard) and send a Referer only to their own origin (URLs may carry
 * filters; `no-referrer` would make browsers send `Origin: null` with the dashboard's own forms).
 */
export const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'Content-Security-Policy':
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
  'Referrer-Policy': 'same-origin',
  'Cache-Control': 'no-store',
};

export const HTML_CONTENT_TYPE = 'text/html; charset=utf-8';

/** A route that answers with a page (a string) and the security headers. */
export function HtmlPage(): MethodDecorator {
  return applyDecorators(Header('Content-Type', HTML_CONTENT_TYPE), ...Object.entries(SECURITY_HEADERS).map(([k, v]) => Header(k, v)));
}

/** A route that answers with a stylesheet (a string), cacheable by this browser only. */
export function Stylesheet(): MethodDecorator {
  return applyDecorators(
    Header('Content-Type', 'text/css; charset=utf-8'),
    ...Object.entries(SECURITY_HEADERS).map(([k, v]) => Header(k, k === 'Cache-Control' ? 'private, max-age=300' : v)),
  );
}
