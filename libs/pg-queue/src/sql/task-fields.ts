import type { NewTaskRow } from '../core/task-row';
import type { TaskInfo } from '../types';

/**
 * Every column of a task, live (`task`) and finished (`task_archive`): the one list from which the
 * statements that write, move or show a whole task take their columns (enqueue and its variants,
 * follow-ups, dependants, the archive insert, get and list), the enqueue's JSON row encoding, and
 * the TaskInfo mapping. task-fields.spec compares it with the tables a fresh install creates.
 *
 * Adding a stored field: a line here, a migration that adds the column (to task_archive too when
 * it is archived), and the code that uses it (its option, its validation, what reads it): the
 * statements pick it up from here.
 */
type Encoding = 'text' | 'number' | 'json' | 'date' | 'list';

interface TaskField {
  column: string;
  /** Its SQL type, as format_type() prints it. */
  type: string;
  /** Where it is stored: the live table, the archive, or both (copied when a task finishes). */
  in: 'both' | 'task' | 'archive';
  /**
   * Written by an enqueue, from NewTaskRow's property `from`, encoded so in the enqueue's JSON
   * rows: a string, a number, a list of strings, or JSON text embedded as it is (each or null). `value`: what
   * the input row `i` gives the column (default `i.<column>`). `lean: false`: plain enqueues
   * (insertManyLean) carry none, so a row that has one goes the JSON way. `debounced: false`: a
   * debounced enqueue does not write it.
   */
  enqueue?: { from: keyof NewTaskRow; encoding: Encoding; value?: string; lean?: false; debounced?: false };
  /** What the archive stores when the task moves there, from the live row `r` (default the column). */
  archived?: (r: string) => string;
  /**
   * get() and list() return it as this TaskInfo property; `read` is the expression that reads it
   * from either table (default the column). A live row shows what its `archived` value would be.
   */
  info?: { as: keyof TaskInfo; read?: string };
  /** The dashboard shows it in its task list and on the task's page, or on the page only (under its TaskInfo name). */
  dashboard?: 'list' | 'page';
}

// Generic, so that each field's column and TaskInfo name stay literal types (TaskRow, the check below).
const field = <const C extends string, const R extends Omit<TaskField, 'column' | 'type'>>(column: C, type: string, rest: R) => ({ column, type, ...rest });

export const TASK_FIELDS = [
  field('id', 'bigint', { in: 'both', dashboard: 'list', info: { as: 'id', read: 'id::text' } }),
  field('queue', 'text', { in: 'both', dashboard: 'list', enqueue: { from: 'queue', encoding: 'text' }, info: { as: 'queue' } }),
  field('state', 'text', { in: 'both', dashboard: 'list', info: { as: 'state' } }),
  // A JSON null payload arrives as SQL NULL: it is the JSON value null.
  field('payload', 'jsonb', { in: 'both', dashboard: 'page', enqueue: { from: 'payloadJson', encoding: 'json', value: `coalesce(i.payload, 'null'::jsonb)` }, info: { as: 'payload' } }),
  field('priority', 'integer', { in: 'both', dashboard: 'list', enqueue: { from: 'priority', encoding: 'number' }, info: { as: 'priority' } }),
  // An absolute due time, or the delay from the database's clock (the input's delay_ms).
  field('run_at', 'timestamp with time zone', {
    in: 'both', dashboard: 'list',
    enqueue: { from: 'runAt', encoding: 'date', value: `coalesce(i.run_at, now() + i.delay_ms * interval '1 millisecond')` },
    info: { as: 'runAt' },
  }),
  field('attempt', 'integer', { in: 'both', dashboard: 'list', info: { as: 'attempt' } }),
  // Live: the enqueuer's explicit limit; archived: the limit that was in force.
  field('max_attempts', 'integer', {
    in: 'both', dashboard: 'list',
    enqueue: { from: 'maxAttempts', encoding: 'number' },
    archived: (r: string) => `coalesce(${r}.max_attempts, ${r}.attempt_limit)`,
    info: { as: 'maxAttempts' },
  }),
  field('locked_by', 'text', { in: 'task', dashboard: 'page', info: { as: 'lockedBy' } }),
  field('lease_token', 'uuid', { in: 'task' }),
  field('locked_until', 'timestamp with time zone', { in: 'task', dashboard: 'page', info: { as: 'lockedUntil' } }),
  field('last_error', 'text', { in: 'both', dashboard: 'list', info: { as: 'lastError' } }),
  field('parent_id', 'bigint', { in: 'both', dashboard: 'page', enqueue: { from: 'parentId', encoding: 'text', lean: false, debounced: false }, info: { as: 'parentId', read: 'parent_id::text' } }),
  field('created_at', 'timestamp with time zone', { in: 'both', dashboard: 'list', info: { as: 'createdAt' } }),
  field('started_at', 'timestamp with time zone', { in: 'both', dashboard: 'page', info: { as: 'startedAt' } }),
  field('finished_at', 'timestamp with time zone', { in: 'both', dashboard: 'list', info: { as: 'finishedAt' } }),
  field('dedup_key', 'text', { in: 'both', dashboard: 'list', enqueue: { from: 'dedupKey', encoding: 'text', lean: false, debounced: false }, info: { as: 'key' } }),
  field('group_key', 'text', { in: 'both', dashboard: 'list', enqueue: { from: 'groupKey', encoding: 'text', lean: false }, info: { as: 'group' } }),
  // The payload of the run asked for while the task ran (onConflict 'rerun').
  field('rerun_payload', 'jsonb', { in: 'task' }),
  // The limit in force, recorded by the claim.
  field('attempt_limit', 'integer', { in: 'task' }),
  // A group task's place in its group (task_group_pos_idx), when not its id.
  field('group_pos', 'bigint', { in: 'task' }),
  // insertManyLean carries one trace context for all its rows.
  field('trace_context', 'jsonb', { in: 'both', enqueue: { from: 'traceContext', encoding: 'json' } }),
  field('partition_key', 'text', { in: 'both', enqueue: { from: 'partitionKey', encoding: 'text', lean: false } }),
  field('debounce_key', 'text', { in: 'task' }),
  field('debounce_until', 'timestamp with time zone', { in: 'task' }),
  field('depends_on', 'bigint[]', { in: 'both', info: { as: 'dependsOn', read: 'depends_on::text[]' } }),
  // Only a waiting task has dependencies left.
  field('deps_left', 'integer', { in: 'task', info: { as: 'dependenciesLeft', read: `CASE WHEN state = 'waiting' THEN deps_left END` } }),
  field('dependants', 'bigint[]', { in: 'both', info: { as: 'dependants', read: 'dependants::text[]' } }),
  field('parent_results', 'jsonb', { in: 'task' }),
  // A parked workflow's wake-up, what it waits for, and whether it was woken.
  field('wake_at', 'timestamp with time zone', { in: 'task' }),
  field('waiting_for', 'text', { in: 'task' }),
  field('woken', 'boolean', { in: 'task' }),
  field('progress', 'jsonb', { in: 'both', dashboard: 'list', info: { as: 'progress' } }),
  field('log', 'jsonb', { in: 'both' }),
  field('watched', 'boolean', { in: 'task' }),
  field('workflow_parents', 'bigint[]', { in: 'task' }),
  field('tags', 'text[]', { in: 'both', dashboard: 'list', enqueue: { from: 'tags', encoding: 'list', lean: false }, info: { as: 'tags' } }),
  // The handler's return value: only a finished task has one.
  field('result', 'jsonb', { in: 'archive', info: { as: 'result' } }),
] as const satisfies readonly TaskField[];

type Field = (typeof TASK_FIELDS)[number] & TaskField;
const fields: readonly TaskField[] = TASK_FIELDS;

const enqueued = fields.filter((f) => f.enqueue);

/** The columns an enqueue writes, in one order: `INSERT INTO task (${ENQUEUED_COLUMNS})`. */
export const ENQUEUED_COLUMNS = enqueued.map((f) => f.column).join(', ');

/**
 * The rows to insert, from one JSON array parameter ($n; built by `taskRowsJson`), in input order,
 * with a column for each of ENQUEUED_COLUMNS and `ord`. One string costs Prisma's driver stack
 * once, where an array parameter per column costs it per element.
 */
export function taskInput(param: number): string {
  const keys = [...enqueued.map((f) => `${f.column} ${f.type}`), 'delay_ms bigint'];
  const names = [...enqueued.map((f) => f.column), 'delay_ms'];
  return `
  SELECT ${enqueued.map((f) => (f.enqueue!.value ? `${f.enqueue!.value} AS ${f.column}` : `i.${f.column}`)).join(', ')}, i.ord
  FROM ROWS FROM (json_to_recordset($${param}::json) AS (${keys.join(', ')}))
    WITH ORDINALITY AS i(${names.join(', ')}, ord)`;
}

/** ENQUEUED_COLUMNS of input row `alias` (a CTE of taskInput). */
export const enqueuedValues = (alias: string): string => enqueued.map((f) => `${alias}.${f.column}`).join(', ');

/**
 * The rows for taskInput as one JSON array. Payloads and trace contexts are embedded as they are
 * (serialisePayload already produced valid JSON); every other value is a validated number, a Date
 * or a string escaped by JSON.stringify.
 */
export function taskRowsJson(rows: NewTaskRow[]): string {
  let json = '[';
  for (let i = 0; i < rows.length; i++) json += (i === 0 ? '' : ',') + rowJson(rows[i]);
  return `${json}]`;
}

/**
 * One row's JSON object, as a function generated once from the definition: the same string
 * concatenation a hand-written encoder does, where looking each field's encoding up per row costs
 * the hot path of bulk enqueues. Only the definition's own column and property names go into it.
 */
const rowJson = new Function(
  'r',
  `return '{"delay_ms":' + r.delayMs${enqueued.map((f) => ` + ',"${f.column}":' + ${encoded(f.enqueue!.encoding, `r.${String(f.enqueue!.from)}`)}`).join('')} + '}';`,
) as (row: NewTaskRow) => string;

function encoded(encoding: Encoding, v: string): string {
  switch (encoding) {
    case 'text':
    case 'list': return `(${v} == null ? 'null' : JSON.stringify(${v}))`;
    case 'date': return `(${v} == null ? 'null' : '"' + ${v}.toISOString() + '"')`;
    default: return `(${v} ?? 'null')`;
  }
}

/** What plain enqueues (insertManyLean) do not carry: a row with any of them goes the JSON way. */
const notLean = enqueued.filter((f) => f.enqueue!.lean === false);

/** Whether `row` has none of what insertManyLean leaves out. */
export const isLeanRow = (row: NewTaskRow): boolean => notLean.every((f) => row[f.enqueue!.from] === null);

/** The columns insertManyLean does not carry, as NULLs of their types for its input CTE. */
export const LEAN_NULLS = notLean.map((f) => `NULL::${f.type} AS ${f.column}`).join(', ');

const debounced = enqueued.filter((f) => f.enqueue!.debounced !== false);

/** The columns a debounced enqueue writes (not a parent, nor a dedup key). */
export const DEBOUNCED_COLUMNS = debounced.map((f) => f.column).join(', ');

/** DEBOUNCED_COLUMNS' values from the input CTE, but its due time. */
export const debouncedValues = (runAt: string): string => debounced.map((f) => (f.column === 'run_at' ? runAt : f.column)).join(', ');

const archived = fields.filter((f) => f.in !== 'task');

/**
 * The INSERT that moves finished live rows `r` (columns as in task) to the archive, up to its
 * FROM: every archived field copied (or as its `archived` says), the archive's own fields and those
 * the finishing statement decides (state, times) from `given`.
 */
export function archiveInsert(s: string, r: string, given: Partial<Record<string, string>>): string {
  const values = archived.map((f) => given[f.column] ?? (f.in === 'archive' ? missing(f.column) : f.archived ? f.archived(r) : `${r}.${f.column}`));
  return `INSERT INTO ${s}.task_archive (${archived.map((f) => f.column).join(', ')})
  SELECT ${values.join(', ')}`;
}

function missing(column: string): never {
  throw new Error(`archiveInsert: task_archive.${column} has no live column: the statement must give it`);
}

const shown = fields.filter((f) => f.info);

/**
 * What get() and list() select from `table` as TaskRow's columns: each shown field's `read`, NULL
 * where that table does not store it; the same columns in the same order from either table, so
 * that they can be UNION ALLed.
 */
export function taskRowColumns(table: 'task' | 'task_archive'): string {
  return shown
    .map((f) => {
      if (!storedIn(f, table)) return `NULL::${f.type} AS ${f.column}`;
      return `${table === 'task' && f.archived ? f.archived(table) : (f.info!.read ?? f.column)} AS ${f.column}`;
    })
    .join(', ');
}

const storedIn = (f: TaskField, table: 'task' | 'task_archive') => f.in === 'both' || (f.in === 'task') === (table === 'task');

const onDashboard = (view: 'list' | 'page') => fields.filter((f) => f.dashboard === 'list' || (view === 'page' && f.dashboard === 'page'));

/**
 * The fields the dashboard shows in its task list, or on a task's page (the list's and the page's
 * own), as `table` stores them, under their column names: a live row's limit as it is in force, NULL
 * where the table has no such column. For a subquery that `dashboardShown` reads.
 */
export function dashboardStored(view: 'list' | 'page', table: 'task' | 'task_archive'): string {
  return onDashboard(view)
    .map((f) => (!storedIn(f, table) ? `NULL::${f.type} AS ${f.column}` : table === 'task' && f.archived ? `${f.archived(table)} AS ${f.column}` : f.column))
    .join(', ');
}

/** The same fields of a row of dashboardStored, named as TaskInfo names them; `display` changes how one reads (by column). */
export function dashboardShown(view: 'list' | 'page', display: Partial<Record<string, (read: string) => string>> = {}): string {
  return onDashboard(view)
    .map((f) => {
      const read = display[f.column]?.(f.info?.read ?? f.column) ?? f.info?.read ?? f.column;
      const name = f.info?.as ?? f.column;
      return read === name ? read : `${read} AS "${name}"`;
    })
    .join(', ');
}

type ShownField = Extract<Field, { info: object }>;
/** A task as get() and list() read it: each shown field by its column, typed as its TaskInfo property. */
export type TaskRow = { [F in ShownField as F['column']]: TaskInfo[F['info']['as']] };

/** The statements' row as the public shape. */
export function toTaskInfo(row: TaskRow): TaskInfo {
  const info: Record<string, unknown> = {};
  for (const f of shown) info[f.info!.as] = (row as Record<string, unknown>)[f.column] ?? null;
  return info as unknown as TaskInfo;
}

// Every TaskInfo property but the workflow view (which `get` adds) is a field's: a property
// added to TaskInfo without one fails the build here.
type Unshown = Exclude<keyof TaskInfo, ShownField['info']['as'] | 'workflow'>;
export const everyTaskInfoPropertyShown: [Unshown] extends [never] ? true : { unshown: Unshown } = true;
