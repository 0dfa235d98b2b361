/**
 * The rules for the values that name and order tasks, one function each: every entry point (the
 * API, handlers, the dashboard, the CLI) checks with these and throws its own kind of error.
 */

/** 1-128 characters from [A-Za-z0-9_.:-]. */
const QUEUE_NAME = /^[A-Za-z0-9_.:-]{1,128}$/;

export function isQueueName(value: unknown): value is string {
  return typeof value === 'string' && QUEUE_NAME.test(value);
}

/** A task id: a positive bigint as a canonical decimal string (what the API hands out). */
export function isTaskId(value: unknown): value is string {
  // 19 digits can still exceed bigint's maximum; equal-length digit strings compare like numbers.
  return typeof value === 'string' && /^[1-9][0-9]{0,18}$/.test(value) && !(value.length === 19 && value > '9223372036854775807');
}

export const PRIORITY_MIN = -2_147_483_648;
export const PRIORITY_MAX = 2_147_483_647;

/** A priority: a 32-bit integer (the column's type); lower runs first. */
export function isPriority(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= PRIORITY_MIN && value <= PRIORITY_MAX;
}

/** The most tasks one claim takes: the handler option batchSize's ceiling (the plain claim's plan relies on it, see claim.sql.ts). */
export const CLAIM_MAX = 1000;

/** The heaviest partition weight (the CHECK on partition_weight says the same). */
export const WEIGHT_MAX = 1000;

/** A partition's weight: its turns in each round of a partitioned claim (the partitioned claim in claim.sql.ts). */
export function isWeight(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= WEIGHT_MAX;
}

/** An unpaired UTF-16 surrogate: JSON.stringify escapes it, jsonb refuses the escape, and no UTF-8 text holds one. */
export const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** A key (dedup, group, partition, debounce): a non-empty string of at most 512 characters, without NUL or unpaired surrogates. */
export function isTextKey(value: unknown): value is string {
  return typeof value === 'string' && value.length > 0 && value.length <= 512 && !value.includes('\u0000') && !LONE_SURROGATE.test(value);
}
