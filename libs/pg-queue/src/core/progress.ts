/**
 * The fraction a progress value states, when it has the shape `{ done, of }` with finite numbers
 * and `of` > 0 (the dashboard draws a bar, the CLI a percentage); null for any other value, which
 * is shown as its JSON. Clamped to [0, 1].
 */
export function progressFraction(value: unknown): { done: number; of: number; fraction: number } | null {
  if (value === null || typeof value !== 'object') return null;
  const { done, of } = value as { done?: unknown; of?: unknown };
  if (typeof done !== 'number' || typeof of !== 'number' || !Number.isFinite(done) || !Number.isFinite(of) || of <= 0) return null;
  return { done, of, fraction: Math.min(1, Math.max(0, done / of)) };
}

/** A progress value as short text: `40/100 (40%)` for `{ done, of }`, else its JSON; null for none. */
export function progressText(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  const f = progressFraction(value);
  return f === null ? JSON.stringify(value) : `${f.done}/${f.of} (${Math.floor(f.fraction * 100)}%)`;
}
