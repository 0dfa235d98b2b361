import { PgQueueError } from '../errors';
import type { NewTaskRow } from '../core/task-row';
import { isLeanRow } from './task-fields';

/**
 * The values that travel between the worker and the statements: the shapes of rows and leases,
 * and their encodings. Ids, tokens and run times go as comma-separated text and claimed rows come
 * back as one JSON array: Prisma's driver stack costs CPU per array element and per row, which adds
 * up at high task rates.
 */

// The rows an enqueue produces are core's (core/task-row.ts); the statements' callers find them here too.
export type { DependsOnRef, NewTaskDebounce, NewTaskRow } from '../core/task-row';

export interface ClaimedRow {
  id: string;
  queue: string;
  payload: unknown;
  priority: number;
  /** Epoch milliseconds. */
  run_at_ms: number;
  attempt: number;
  max_attempts: number;
  /** Epoch milliseconds. */
  created_at_ms: number;
  lease_token: string;
  parent_id: string | null;
  group_key: string | null;
  dedup_key: string | null;
  /** The enqueuer's trace context (a propagation carrier), or null. */
  trace_context: Record<string, string> | null;
  /** Returned by partitioned claims only (limits.sql.ts). */
  partition_key?: string | null;
}

/** The backend and transaction a transactional batch runs on (see lockLeases). */
export interface BatchBackend {
  pid: number;
  xactId: string;
}

/** What one claim brought back. */
export interface Claim {
  rows: ClaimedRow[];
  /**
   * When the claim came back short: how long until the queue's next not-yet-due task is due, by
   * the database's clock (null: none waits). Unset after a full claim (the worker claims again).
   */
  nextDueInMs: number | null;
  /** The database's clock (epoch ms) when the claim ran. */
  dbNowMs: number;
  /** Set by a claim that took nothing: the queue is paused as a whole (see pause.sql.ts). */
  paused?: boolean;
  /** A limited claim: it left no room under the queue's global or its limiter's concurrency. */
  full?: boolean;
}

export interface Lease {
  id: string;
  token: string;
}

/** A lease whose handler ran, with when (performance.now() values of this process). */
export interface RanLease extends Lease {
  startedAt: number;
  finishedAt: number;
  /** The handler's return value as JSON text, if any. */
  result?: string;
}

/** The handlers' results of a completion, as one JSON object by task id ('{}' for none). */
export function resultsJson(leases: RanLease[]): string {
  let json = '';
  for (const l of leases) if (l.result !== undefined) json += `${json === '' ? '' : ','}"${l.id}":${l.result}`;
  return `{${json}}`;
}

export type FailedState = 'pending' | 'dead' | 'cancelled';

/** A back-off a handler asked for (backoff.sql.ts), its scope resolved: `limiter` names the limiter for scope 'limiter'. */
export interface BackOff extends Lease {
  /**
   * When it ends, as the database's clock reads (epoch ms): the handler's end plus its
   * retryAfterMs, so a statement that waited for a pool connection does not push it later.
   */
  untilMs: number;
  scope: 'task' | 'queue' | 'partition' | 'limiter';
  limiter: string | null;
  reason: string;
}

/** $4 of the back-off statement (complete.sql.ts): each back-off by its task's id. */
export function backOffsJson(backOffs: BackOff[]): string {
  const byId: Record<string, { untilMs: number; scope: BackOff['scope']; limiter: string | null; reason: string }> = {};
  for (const b of backOffs) byId[b.id] = { untilMs: b.untilMs, scope: b.scope, limiter: b.limiter, reason: b.reason };
  return JSON.stringify(byId);
}

export interface Failure extends Lease {
  error: string;
  delayMs: number;
  fatal: boolean;
  /** How long the failed attempt's handler ran, for the task's log; null when it is not known. */
  ranMs?: number | null;
}

export interface CompleteResult {
  done: Set<string>;
  cancelled: Set<string>;
  rerun: Set<string>;
  /** Attempts whose follow-ups could not be inserted, with why: not completed, lease still held. */
  failed: Map<string, Error>;
  /** Attempts not completed because a business transaction holds their row (byLeaseWhenHeld): lease still held, to complete later. */
  held: Set<string>;
}


/**
 * The rows for insertManyLean (enqueue.sql.ts) as its first seven parameters, when every row is a
 * plain one (isLeanRow: no parent, group, partition or dedup key, ...), with one trace context for
 * all (an enqueueMany call's); else null (taskRowsJson then). Numbers, dates and queue names (which have
 * no comma: isQueueName) go as comma-separated text, the payloads as one JSON array: the server
 * splits those for a fraction of what reading every field of a JSON row costs.
 */
export function leanTaskColumns(rows: NewTaskRow[]): [string, string, string, string, string, string, string | null] | null {
  const trace = rows[0].traceContext;
  let queues = '';
  let payloads = '';
  let priorities = '';
  let delays = '';
  let runAts = '';
  let attempts = '';
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i];
    if (!isLeanRow(r) || r.traceContext !== trace) return null;
    const sep = i === 0 ? '' : ',';
    queues += sep + r.queue;
    payloads += sep + r.payloadJson;
    priorities += sep + r.priority;
    delays += sep + r.delayMs;
    runAts += sep + (r.runAt ? r.runAt.toISOString() : '');
    attempts += sep + (r.maxAttempts === null ? '' : r.maxAttempts);
  }
  return [queues, `[${payloads}]`, priorities, delays, runAts, attempts, trace];
}

/** $1 and $2 of the lease statements: ids and tokens as comma-separated text (see HELD). */
export function leaseParams(leases: Lease[]): [string, string] {
  let ids = '';
  let tokens = '';
  for (let i = 0; i < leases.length; i++) {
    const sep = i === 0 ? '' : ',';
    ids += sep + leases[i].id;
    tokens += sep + leases[i].token;
  }
  return [ids, tokens];
}

/** Milliseconds per lease as comma-separated text, to 0.1 ms (see complete.sql.ts). */
export function msList(leases: RanLease[], ms: (l: RanLease) => number): string {
  let list = '';
  for (let i = 0; i < leases.length; i++) list += (i === 0 ? '' : ',') + ms(leases[i]).toFixed(1);
  return list;
}

/** An id list from a statement's result (idList in fragments.sql). */
export function parseIds(list: string): string[] {
  return list === '' ? [] : list.split(',');
}

/** A release's or back-off's result row (complete.sql.ts, releasing): every lease given back, and those of them ended cancelled. */
export interface GivenBackRow {
  released_ids: string;
  cancelled_ids: string;
}

/**
 * The ids of the leases a release or back-off gave back; `cancelled` holds those among them whose
 * cancel was requested while they ran, which the statement ended cancelled instead of due again.
 */
export class GivenBack extends Set<string> {
  readonly cancelled = new Set<string>();

  /** Adds what one statement gave back (its result rows). */
  addRows([row]: GivenBackRow[]): void {
    for (const id of parseIds(row.released_ids)) this.add(id);
    for (const id of parseIds(row.cancelled_ids)) this.cancelled.add(id);
  }

  /** Where the statement left task `id`'s lease: given back, ended cancelled, or not held any more (lost). */
  outcomeOf(id: string): 'given-back' | 'cancelled' | 'lost' {
    return this.cancelled.has(id) ? 'cancelled' : this.has(id) ? 'given-back' : 'lost';
  }
}

/**
 * The finishing statements fence by id and token set (HELD, see complete.sql.ts), which
 * identifies each lease only while a statement carries at most one lease per task.
 */
export function assertOneLeasePerTask(leases: Lease[]): void {
  if (new Set(leases.map((l) => l.id)).size !== leases.length) {
    throw new PgQueueError('pg-queue: internal error: two leases of one task in one statement');
  }
}

/**
 * Splits entries into runs with at most one lease per task (almost always a single run): a
 * worker may still hold a lost lease of a task it has claimed again.
 */
export function oneLeasePerTask<T>(entries: T[], taskId: (e: T) => string): T[][] {
  const runs: { ids: Set<string>; entries: T[] }[] = [];
  for (const e of entries) {
    const id = taskId(e);
    let run = runs.find((r) => !r.ids.has(id));
    if (!run) runs.push((run = { ids: new Set(), entries: [] }));
    run.ids.add(id);
    run.entries.push(e);
  }
  return runs.map((r) => r.entries);
}
