/**
 * Safe HTML by construction: pages are written with the `html` tag, which escapes every value it
 * interpolates unless that value is itself `Html` (made by the tag, so escaped in turn). No other
 * way to make `Html` exists, so nothing a user controls (payloads, errors, keys, groups, filters,
 * the request path) can reach a page unescaped.
 *
 * Why a 5-character escaper and no dependency: the templates put values only into element text
 * and into double-quoted attribute values (never an unquoted attribute, a tag or attribute name, a
 * `<script>`, a `<style>`, an event handler or the start of a URL: links are built by `links.ts`
 * from the dashboard's own path, with every query value passed through encodeURIComponent). In
 * those two contexts `&`, `<`, `>`, `"` and `'` are the only characters that can end the context
 * or start markup, which is exactly what the `escape-html` package escapes too. The same holds
 * inside inline SVG, which the HTML parser reads with the same rules.
 */
export class Html {
  /** Use the `html` tag; the constructor is not part of the API. */
  constructor(
    readonly text: string,
    brand: typeof HTML_BRAND,
  ) {
    if (brand !== HTML_BRAND) throw new TypeError('Html is made by the html tag only');
  }

  toString(): string {
    return this.text;
  }
}

const HTML_BRAND = Symbol('Html');

const ENTITIES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Text made safe for element content and quoted attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ENTITIES[c]);
}

/** What a template may interpolate: text (escaped), numbers, Html, lists of these; nullish and false render nothing. */
export type HtmlValue = Html | string | number | boolean | null | undefined | readonly HtmlValue[];

/**
 * The page tag. `${value}` is escaped; `${html`...`}` and arrays of it are kept as they are.
 * @example html`<td title="${task.lastError}">${task.queue}</td>`
 */
export function html(strings: TemplateStringsArray, ...values: HtmlValue[]): Html {
  let out = strings[0];
  for (let i = 0; i < values.length; i++) out += render(values[i]) + strings[i + 1];
  return new Html(out, HTML_BRAND);
}

function render(value: HtmlValue): string {
  if (value instanceof Html) return value.text;
  if (Array.isArray(value)) return value.map(render).join('');
  if (value === null || value === undefined || value === false || value === true) return '';
  return escapeHtml(String(value));
}
