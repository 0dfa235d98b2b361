import { InvalidArgumentError } from '../errors';
import { isTaskId } from '../core/task-rules';
import { isOptionsObject, rejectUnknownOptions } from '../option-keys';
import type { TaskState } from '../sql/operator.repository';

/** The arguments of TaskQueue's operator methods, checked before anything reaches the database. */

export type ListFilter = { queue?: string; state?: TaskState; cursor?: string; limit?: number };
export type RetryDeadFilter = { queue: string; errorLike?: string };
export type PurgeFilter = { queue?: string; states: ('done' | 'cancelled' | 'dead')[]; olderThanMs: number };
export type HourlyFilter = { queue?: string; since?: Date };
/** Which part of a queue `pause`/`resume` applies to: the whole queue (default) or one partition. */
export type PauseScope = { partition?: string };

// The keys each filter takes: a misspelled one must not widen the filter (a purge of every queue).
export const LIST_FILTER_KEYS = Object.keys({ queue: true, state: true, cursor: true, limit: true } satisfies Record<keyof ListFilter, true>);
export const RETRY_DEAD_FILTER_KEYS = Object.keys({ queue: true, errorLike: true } satisfies Record<keyof RetryDeadFilter, true>);
export const PURGE_FILTER_KEYS = Object.keys({ queue: true, states: true, olderThanMs: true } satisfies Record<keyof PurgeFilter, true>);
export const HOURLY_FILTER_KEYS = Object.keys({ queue: true, since: true } satisfies Record<keyof HourlyFilter, true>);
const PAUSE_SCOPE_KEYS = Object.keys({ partition: true } satisfies Record<keyof PauseScope, true>);

/** The scope of pause / resume: null for the whole queue, else the partition key (as enqueue checks it). */
export function pauseScope(scope: unknown): string | null {
  if (!isOptionsObject(scope)) throw new InvalidArgumentError('scope', `expected an object, got ${shown(scope)}`);
  rejectUnknownOptions(scope, PAUSE_SCOPE_KEYS, (key, reason) => {
    throw new InvalidArgumentError(`scope.${key}`, reason);
  });
  const { partition } = scope as PauseScope;
  if (partition === undefined) return null;
  if (typeof partition !== 'string' || partition.length === 0 || partition.length > 512 || partition.includes('\u0000')) {
    throw new InvalidArgumentError('scope.partition', `expected a non-empty string of at most 512 characters, without NUL, got ${shown(partition)}`);
  }
  return partition;
}

/** A task id: a positive bigint as a canonical decimal string (what the API hands out). */
export function taskId(id: unknown, argument = 'id'): string {
  if (!isTaskId(id)) {
    throw new InvalidArgumentError(argument, `expected a task id (a positive bigint as a decimal string), got ${shown(id)}`);
  }
  return id;
}

/** A page size (`list`, `topErrors`): an integer in [1, 10000]. */
export function rowLimit(limit: unknown): number {
  if (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1 || limit > 10_000) {
    throw new InvalidArgumentError('limit', `expected an integer in [1, 10000], got ${shown(limit)}`);
  }
  return limit;
}

/**
 * The filter object of list / retryDead / purge / hourly: a missing one is a call-site error, not a
 * TypeError inside; a key it does not take (a misspelling) is an error too, never a wider filter.
 */
export function filterObject(filter: unknown, known: readonly string[]): void {
  if (!isOptionsObject(filter)) throw new InvalidArgumentError('filter', `expected an object, got ${shown(filter)}`);
  rejectUnknownOptions(filter, known, (key, reason) => {
    throw new InvalidArgumentError(`filter.${key}`, reason);
  });
}

/** A bad argument as the caller would write it (JSON.stringify turns NaN into null and throws on BigInt). */
export function shown(value: unknown): string {
  if (typeof value === 'number' || typeof value === 'undefined') return String(value);
  if (typeof value === 'bigint') return `${value}n`;
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}
