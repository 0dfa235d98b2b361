/**
 * The values an enqueue produces once validated (core/task-input.ts) and the statements write
 * (sql/): at the bottom, so that the task rules do not depend on the SQL layer.
 */

/** On a live duplicate key (see sql/enqueue.sql.ts): keep, replace, or run once more after the running one. */
export type ConflictMode = 'ignore' | 'replace' | 'rerun';

/** A row to insert; the payload is already serialised and size-checked. */
export interface NewTaskRow {
  queue: string;
  payloadJson: string;
  priority: number;
  runAt: Date | null;
  delayMs: number;
  /** The enqueuer's explicit limit; null: the handler that claims the task decides. */
  maxAttempts: number | null;
  parentId: string | null;
  dedupKey: string | null;
  groupKey: string | null;
  /** What to do when `dedupKey` is live already; only read when dedupKey is set. */
  onConflict: ConflictMode;
  /** The enqueuer's trace context as JSON text (see observability/tracing.ts), or null. */
  traceContext: string | null;
  /** The enqueue option `tags`, checked, or null. */
  tags: string[] | null;
  /** The enqueue option `partition` (flow control, see limits.sql.ts), or null. */
  partitionKey: string | null;
  /** The enqueue option `weight` of the partition (the partitioned claim in claim.sql.ts), or null. */
  weight?: number | null;
  /** The enqueue option `debounce` (see debounce.sql.ts), or null. */
  debounce: NewTaskDebounce | null;
  /** The enqueue option `dependsOn` (see dependencies.sql.ts), checked; null without. */
  dependsOn: DependsOnRef[] | null;
}

/** A parent: an existing task, or another row of the same enqueue call (its index). */
export type DependsOnRef = { id: string } | { item: number };

export interface NewTaskDebounce {
  key: string;
  delayMs: number;
  /** null: no bound. */
  maxDelayMs: number | null;
  leading: boolean;
}
