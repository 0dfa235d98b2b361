import { isPriority, isQueueName, isTaskId, PRIORITY_MAX, PRIORITY_MIN } from '../core/task-rules';
import { TASK_STATES } from '../core/task-states';
import type { DashboardTaskState, TaskListFilter } from '../sql/dashboard.repository';
import { BadDashboardInput } from './dashboard.filter';

/**
 * The dashboard's reading of query strings and form fields. A value must be a plain string (a
 * query parser may hand over arrays or objects for `a[]=` or `a[b]=`); anything unusable is a 400
 * whose message names the field, never the value.
 */
const MAX_TEXT = 500;

type Fields = Record<string, unknown> | undefined;

/** A task id: a positive bigint as a decimal string. */
export function taskIdParam(value: unknown, field = 'id'): string {
  if (!isTaskId(value)) {
    throw new BadDashboardInput(field, 'a task id');
  }
  return value;
}

/** The task list's filters and cursor; empty fields mean "any". */
export function listFilter(query: Fields): TaskListFilter {
  const state = text(query, 'state');
  if (state !== null && !TASK_STATES.includes(state as DashboardTaskState)) throw new BadDashboardInput('state', TASK_STATES.join(', '));
  const cursor = text(query, 'cursor');
  return {
    queue: queueName(query, 'queue', false),
    state: state as DashboardTaskState | null,
    key: text(query, 'key'),
    group: text(query, 'group'),
    tag: text(query, 'tag'),
    error: text(query, 'error'),
    cursor: cursor === null ? null : taskIdParam(cursor, 'cursor'),
  };
}

/** A queue name ([A-Za-z0-9_.:-], 1-128 characters). */
export function queueName(fields: Fields, name: string, required: true): string;
export function queueName(fields: Fields, name: string, required: false): string | null;
export function queueName(fields: Fields, name: string, required: boolean): string | null {
  const value = text(fields, name);
  if (value === null) {
    if (required) throw new BadDashboardInput(name, 'a queue name');
    return null;
  }
  if (!isQueueName(value)) throw new BadDashboardInput(name, 'a queue name of 1-128 characters from [A-Za-z0-9_.:-]');
  return value;
}

/** A priority: a 32-bit integer, as typed in the form. */
export function priorityField(fields: Fields): number {
  const value = text(fields, 'priority');
  const n = value !== null && /^-?[0-9]{1,10}$/.test(value) ? Number(value) : NaN;
  if (!isPriority(n)) throw new BadDashboardInput('priority', `an integer between ${PRIORITY_MIN} and ${PRIORITY_MAX}`);
  return n;
}

/** A reschedule's delay: whole seconds from now, up to 100 years; in ms. */
export function delayField(fields: Fields): number {
  const value = text(fields, 'delaySeconds');
  const n = value !== null && /^[0-9]{1,10}$/.test(value) ? Number(value) : NaN;
  if (!(n <= 100 * 365 * 86_400)) throw new BadDashboardInput('delaySeconds', 'whole seconds from 0 to 100 years');
  return n * 1000;
}

/** A new payload: JSON text (its size and content are checked as enqueue checks them). */
export function payloadField(fields: Fields): unknown {
  const value = fields?.payload;
  if (typeof value !== 'string') throw new BadDashboardInput('payload', 'JSON text');
  try {
    return JSON.parse(value);
  } catch {
    throw new BadDashboardInput('payload', 'valid JSON');
  }
}

/** The notice after a redirect: a known key and a count (the page maps the key to a fixed sentence). */
export function noticeParams(query: Fields): { key?: string; count?: number } {
  const key = typeof query?.notice === 'string' ? query.notice : undefined;
  const n = typeof query?.n === 'string' && /^[0-9]{1,9}$/.test(query.n) ? Number(query.n) : undefined;
  return { key, count: n };
}

/**
 * A free-text field, trimmed; null when absent or empty. At most 500 characters and no U+0000
 * (Postgres text cannot hold it).
 */
export function text(fields: Fields, name: string): string | null {
  const value = fields?.[name];
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string') throw new BadDashboardInput(name, 'a single text value');
  const trimmed = value.trim();
  if (trimmed.length > MAX_TEXT || trimmed.includes('\u0000')) throw new BadDashboardInput(name, `text of at most ${MAX_TEXT} characters`);
  return trimmed === '' ? null : trimmed;
}

/** A case-insensitive "contains" as an ILIKE pattern: the text's own %, _ and \ match themselves. */
export function containsPattern(value: string): string {
  return `%${value.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}
