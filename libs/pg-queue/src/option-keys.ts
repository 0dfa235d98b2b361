/**
 * The rule for keys of every options object the library validates: a key it does not know is a
 * mistake (most often a misspelling that would otherwise be ignored, leaving the default in force),
 * never silently dropped. Each caller passes its own `fail`, so the error is the one its other
 * checks throw (InvalidOptionsError and its subclasses, InvalidEnqueueOptionsError, the operator
 * API's InvalidArgumentError for its filters) and names the key's full path.
 */
export function rejectUnknownOptions(
  options: object,
  known: readonly string[],
  fail: (key: string, reason: string) => never,
  /** Keys that are options somewhere else: why they are not taken here, and where they go. */
  misplaced: Readonly<Record<string, string>> = {},
): void {
  for (const key of Object.keys(options)) {
    if (known.includes(key)) continue;
    if (Object.hasOwn(misplaced, key)) fail(key, `unknown option ${JSON.stringify(key)}: ${misplaced[key]}`);
    const nearest = nearestName(key, known);
    fail(key, `unknown option ${JSON.stringify(key)}${nearest === null ? ` (expected one of: ${known.join(', ')})` : ` — did you mean ${JSON.stringify(nearest)}?`}`);
  }
}

/** An object as options are given: not null, not an array. */
export function isOptionsObject(value: unknown): value is object {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The known name closest to `name` (case aside), if it is close enough to be a misspelling of it. */
function nearestName(name: string, known: readonly string[]): string | null {
  let best: string | null = null;
  let bestDistance = Infinity;
  for (const candidate of known) {
    const d = editDistance(name.toLowerCase(), candidate.toLowerCase());
    if (d < bestDistance && d <= Math.max(1, Math.ceil(0.4 * Math.max(name.length, candidate.length)))) {
      best = candidate;
      bestDistance = d;
    }
  }
  return best;
}

/** Levenshtein distance, with a swap of two neighbouring characters counted as one edit. */
function editDistance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.length][b.length];
}
