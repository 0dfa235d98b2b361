import type { ClaimedRow, Lease, NewTaskRow, RanLease } from '../sql/statement-values';
import type { Task } from '../types';
import type { AttemptReporter } from './attempt.reporter';

/** One claimed attempt of a task, from claim to its recorded outcome. */
export class Attempt {
  readonly task: Task;
  readonly lease: Lease;
  /** Why the attempt was aborted (timeout, cancel, shutdown, lost lease); undefined while it may run on. */
  abortReason: unknown = undefined;
  aborted = false;
  /** The running handler's invoker, told of an abort at once. */
  onAbort: ((reason: unknown) => void) | null = null;
  /** Created when a handler first reads ctx.signal: most never do, and an AbortController per task is costly at high rates. */
  private controller: AbortController | null = null;
  /** Follow-ups from ctx.enqueue, inserted only with this attempt's successful completion. */
  readonly followUps: NewTaskRow[] = [];
  /** What the handler returned, as JSON text (see keepResult); undefined for nothing. */
  result: string | undefined = undefined;
  /** Set once the handler has returned; later ctx.enqueue calls are refused. */
  finished = false;
  /** ctx.progress and ctx.log, once a handler first calls one (kept across a transactional re-run). */
  reporter: AttemptReporter | null = null;
  startedAt = 0;
  /** When the handler ran, as performance.now() values (recorded with the completion). */
  ranFrom = 0;
  ranUntil = 0;
  readonly groupKey: string | null;
  /** The enqueuer's trace context, which the handler's span continues. */
  readonly traceContext: Record<string, string> | null;

  constructor(row: ClaimedRow) {
    this.task = {
      id: row.id,
      queue: row.queue,
      payload: row.payload,
      attempt: row.attempt,
      maxAttempts: row.max_attempts,
      priority: row.priority,
      runAt: new Date(row.run_at_ms),
      createdAt: new Date(row.created_at_ms),
      parentId: row.parent_id,
    };
    this.lease = { id: row.id, token: row.lease_token };
    this.groupKey = row.group_key;
    this.traceContext = row.trace_context;
  }

  /** The handler's `ctx.signal`. */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.abortReason);
    }
    return this.controller.signal;
  }

  /** Aborts the attempt once; later calls keep the first reason. */
  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.abortReason = reason;
    this.controller?.abort(reason);
    this.onAbort?.(reason);
  }

  /** Resets per-run state: a transactional attempt whose transaction rolled back runs again. */
  beginRun(): void {
    this.finished = false;
    this.followUps.length = 0;
    this.result = undefined;
    this.startedAt = Date.now();
    this.ranFrom = performance.now();
  }

  /** The handler returned (or was given up on). */
  endRun(): void {
    this.finished = true;
    this.ranUntil = performance.now();
  }

  /** The lease with when its handler ran, for the completion. */
  get ranLease(): RanLease {
    return { id: this.lease.id, token: this.lease.token, startedAt: this.ranFrom, finishedAt: this.ranUntil, result: this.result };
  }

  get isLastAttempt(): boolean {
    return this.task.attempt >= this.task.maxAttempts;
  }
}

/** Claim order (priority, run_at, id): the claim's RETURNING order is not guaranteed. */
export function byClaimOrder(a: Attempt, b: Attempt): number {
  return a.task.priority - b.task.priority || a.task.runAt.getTime() - b.task.runAt.getTime() || compareIds(a.task.id, b.task.id);
}

/**
 * Claim order under priority aging (the aging claim, claim.sql.ts): priority * agingMs + run_at, then id, so that a
 * batch starts its aged tasks before the younger urgent ones it took with them.
 */
export function byAgedOrder(agingMs: number): (a: Attempt, b: Attempt) => number {
  const key = (x: Attempt) => x.task.priority * agingMs + x.task.runAt.getTime();
  return (a, b) => key(a) - key(b) || compareIds(a.task.id, b.task.id);
}

/** Compares bigint ids given as decimal strings (no sign, no leading zeros) without parsing them. */
function compareIds(a: string, b: string): number {
  return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
}
