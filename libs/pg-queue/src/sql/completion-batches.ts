import type { NewTaskRow, RanLease } from './statement-values';

/**
 * How many characters of handler results and follow-up payloads one completion statement carries
 * at most (besides a single lease over it, which goes alone): the statement parses them as jsonb,
 * whose objects and arrays stop at 256 MB, and holds them in memory. Characters, not bytes (one to
 * three each in UTF-8): counting them is free and the bound stays well under the limit.
 */
const COMPLETION_CHARS = 32 * 1024 * 1024;

/** `leases` in runs of at most COMPLETION_CHARS of results and follow-up payloads each; almost always one run. */
export function byCompletionBytes(leases: RanLease[], followUps: NewTaskRow[]): RanLease[][] {
  let total = 0;
  for (const l of leases) total += l.result?.length ?? 0;
  for (const f of followUps) total += f.payloadJson.length;
  if (total <= COMPLETION_CHARS) return [leases];
  const followUpChars = new Map<string, number>();
  for (const f of followUps) followUpChars.set(f.parentId!, (followUpChars.get(f.parentId!) ?? 0) + f.payloadJson.length);
  const parts: RanLease[][] = [[]];
  let chars = 0;
  for (const l of leases) {
    const size = (l.result?.length ?? 0) + (followUpChars.get(l.id) ?? 0);
    if (chars + size > COMPLETION_CHARS && parts[parts.length - 1].length > 0) {
      parts.push([]);
      chars = 0;
    }
    parts[parts.length - 1].push(l);
    chars += size;
  }
  return parts;
}
