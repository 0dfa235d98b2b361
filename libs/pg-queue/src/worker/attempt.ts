import type { ClaimedRow, Lease, NewTaskRow } from '../sql/task.repository';
import type { Task } from '../types';

/** One claimed attempt of a task, from claim to its recorded outcome. */
export class Attempt {
  readonly task: Task;
  readonly lease: Lease;
  readonly controller = new AbortController();
  /** Follow-ups from ctx.enqueue, inserted only with this attempt's successful completion. */
  readonly followUps: NewTaskRow[] = [];
  /** Set once the handler has returned; later ctx.enqueue calls are refused. */
  finished = false;
  startedAt = 0;
  readonly groupKey: string | null;

  constructor(row: ClaimedRow) {
    this.task = {
      id: row.id,
      queue: row.queue,
      payload: row.payload,
      attempt: row.attempt,
      maxAttempts: row.max_attempts,
      priority: row.priority,
      runAt: row.run_at,
      createdAt: row.created_at,
      parentId: row.parent_id,
    };
    this.lease = { id: row.id, token: row.lease_token };
    this.groupKey = row.group_key;
  }

  /** Resets per-run state: a transactional attempt whose transaction rolled back runs again. */
  beginRun(): void {
    this.finished = false;
    this.followUps.length = 0;
    this.startedAt = Date.now();
  }

  get isLastAttempt(): boolean {
    return this.task.attempt >= this.task.maxAttempts;
  }
}

/** Claim order (priority, run_at, id): the claim's RETURNING order is not guaranteed. */
export function byClaimOrder(a: Attempt, b: Attempt): number {
  return (
    a.task.priority - b.task.priority ||
    a.task.runAt.getTime() - b.task.runAt.getTime() ||
    (BigInt(a.task.id) < BigInt(b.task.id) ? -1 : 1)
  );
}
