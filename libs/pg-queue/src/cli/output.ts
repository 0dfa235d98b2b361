import type { TaskLogEntry } from '../types';

/** How the CLI prints results: JSON for scripts (--json), aligned text for people. */
export interface Output {
  json: boolean;
  write(text: string): void;
}

function cell(value: unknown): string {
  if (value === null || value === undefined) return '-';
  if (value instanceof Date) return value.toISOString();
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value).replace(/\s+/g, ' ');
}

/** Rows as a table with the given columns (long cells cut at 60 characters). */
export function table(rows: Record<string, unknown>[], columns: string[]): string {
  const cells = rows.map((r) => columns.map((c) => {
    const text = cell(r[c]);
    return text.length > 60 ? `${text.slice(0, 59)}…` : text;
  }));
  const widths = columns.map((c, i) => Math.max(c.length, ...cells.map((row) => row[i].length)));
  const line = (values: string[]) => values.map((v, i) => v.padEnd(widths[i])).join('  ').trimEnd();
  return [line(columns), ...cells.map(line)].join('\n');
}

/** One record as `field: value` lines. */
export function record(value: Record<string, unknown>): string {
  const width = Math.max(...Object.keys(value).map((k) => k.length));
  return Object.entries(value)
    .map(([k, v]) => `${k.padEnd(width)}  ${k === 'payload' || k === 'lastError' ? (typeof v === 'string' ? v : JSON.stringify(v, null, 2)) : cell(v)}`)
    .join('\n');
}

/** A task log entry as one line (an error's text may span more): time, attempt, and what happened. */
export function logLine(e: TaskLogEntry): string {
  const what = e.kind === 'error' ? `failed${e.durationMs === null ? '' : ` after ${e.durationMs} ms`}: ${e.message}` : e.message;
  return `${e.at.toISOString()}  attempt ${e.attempt}  ${what}`;
}

export function print(out: Output, value: unknown, human: () => string): void {
  out.write(`${out.json ? JSON.stringify(value, null, 2) : human()}\n`);
}
