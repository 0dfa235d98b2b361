/** How the pages write times, durations and capped counts (plain text; the `html` tag escapes it). */

/** `2026-11-23 10:15:02Z`: UTC, to the second, so that pages from every instance agree. */
export function timestamp(date: Date | null): string {
  return date ? `${date.toISOString().slice(0, 19).replace('T', ' ')}Z` : '—';
}

/** `3 s ago`, `in 5 min`, relative to `now`. */
export function relative(date: Date | null, now: Date): string {
  if (!date) return '';
  const ms = date.getTime() - now.getTime();
  return ms >= 0 ? `in ${duration(ms)}` : `${duration(-ms)} ago`;
}

/** A duration at a useful precision: `12 ms`, `1.4 s`, `3 min 4 s`, `2 h 5 min`, `3 d 4 h`. */
export function duration(ms: number | null): string {
  if (ms === null || !Number.isFinite(ms)) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86_400)} d ${Math.floor((s % 86_400) / 3600)} h`;
}

/** A count that stopped at `cap` reads `10000+`. */
export function capped(n: number, cap: number): string {
  return n >= cap ? `${cap}+` : String(n);
}

/** The first `max` characters, with an ellipsis when cut. */
export function truncate(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
