import {
  InvalidEnqueueOptionsError,
  InvalidPayloadError,
  InvalidQueueNameError,
  PayloadTooLargeError,
} from '../errors';
import { rejectUnknownOptions } from '../option-keys';
import type { DependsOnRef, NewTaskDebounce, NewTaskRow } from './task-row';
import { isPriority, isQueueName, isTextKey, isWeight, LONE_SURROGATE, WEIGHT_MAX } from './task-rules';
import type { DebounceOptions, EnqueueItem, EnqueueOptions } from '../types';

/** Delays beyond a century are mistakes, and far beyond it Postgres intervals overflow. */
const MAX_DELAY_MS = 100 * 365 * 86_400_000;
export function validateQueueName(queue: unknown): string {
  if (!isQueueName(queue)) throw new InvalidQueueNameError(queue);
  return queue;
}

/** JSON text of a payload, or a typed error for anything JSON would silently change or drop. */
export function serialisePayload(queue: string, payload: unknown, maxBytes: number): string {
  let json: string | undefined;
  try {
    json = JSON.stringify(payload, function (this: Record<string, unknown>, key: string, value: unknown) {
      for (const text of typeof value === 'string' ? [key, value] : [key]) {
        // jsonb cannot store U+0000 (the escaped text "\\u0000" is fine) nor a lone surrogate.
        if (text.includes('\u0000')) throw new InvalidPayloadError(queue, 'contains the character U+0000');
        if (LONE_SURROGATE.test(text)) throw new InvalidPayloadError(queue, 'contains an unpaired UTF-16 surrogate');
      }
      // `this[key]` is the value before toJSON: data JSON would silently drop or turn into null/{}.
      const original = this[key];
      if (original instanceof Date && Number.isNaN(original.getTime())) throw new InvalidPayloadError(queue, 'contains an invalid Date');
      if (original instanceof Map || original instanceof Set) {
        throw new InvalidPayloadError(queue, `contains a ${original.constructor.name} (JSON would store it as {}): convert it first`);
      }
      if (typeof value === 'function' || typeof value === 'symbol') {
        throw new InvalidPayloadError(queue, `contains a ${typeof value}`);
      }
      if (typeof value === 'number' && !Number.isFinite(value)) {
        throw new InvalidPayloadError(queue, `contains the number ${value}`);
      }
      return value;
    });
  } catch (err) {
    if (err instanceof InvalidPayloadError) throw err;
    throw new InvalidPayloadError(queue, (err as Error).message); // BigInt, cycles, throwing toJSON
  }
  if (json === undefined) throw new InvalidPayloadError(queue, 'payload is undefined');
  const bytes = Buffer.byteLength(json, 'utf8');
  if (bytes > maxBytes) throw new PayloadTooLargeError(queue, bytes, maxBytes);
  return json;
}

const ENQUEUE_OPTION_KEYS = Object.keys({
  runAt: true,
  delayMs: true,
  priority: true,
  maxAttempts: true,
  key: true,
  onConflict: true,
  group: true,
  partition: true,
  weight: true,
  tags: true,
  debounce: true,
  dependsOn: true,
} satisfies Record<keyof Omit<EnqueueOptions, 'tx'>, true>);
const DEBOUNCE_KEYS = Object.keys({ key: true, delayMs: true, maxDelayMs: true, mode: true } satisfies Record<keyof DebounceOptions, true>);
const ENQUEUE_ITEM_KEYS = Object.keys({ queue: true, payload: true, options: true } satisfies Record<keyof EnqueueItem, true>);

/** Throws the enqueue error for an option: its argument is the option's full path. */
function failEnqueue(option: string, reason: string): never {
  throw new InvalidEnqueueOptionsError(option, reason);
}

/** enqueueMany's own keys: of each item (`items[i].key`), and of the call's options (only tx). */
export function checkEnqueueManyKeys(items: unknown[], options: unknown): void {
  items.forEach((item, i) => {
    if (typeof item === 'object' && item !== null) rejectUnknownOptions(item, ENQUEUE_ITEM_KEYS, (key, reason) => failEnqueue(`items[${i}].${key}`, reason));
  });
  if (typeof options === 'object' && options !== null) rejectUnknownOptions(options, ['tx'], failEnqueue);
}

/** What enqueue checks rows against, from the module options of the enqueuing process. */
export interface RowLimits {
  maxPayloadBytes: number;
}

/**
 * Validates one enqueue call and turns it into a row; throws before anything is written. Settings
 * the enqueuer does not give explicitly stay unset on the row: the handler that runs the task
 * decides them, whichever process enqueued it (docs/design.md, "Where settings live").
 */
export function buildTaskRow(
  queue: unknown,
  payload: unknown,
  options: Omit<EnqueueOptions, 'tx'> | undefined,
  limits: RowLimits,
  parentId: string | null = null,
  /** The enqueuer's trace context as JSON text (the caller reads it: see observability/tracing.ts). */
  traceContext: string | null = null,
): NewTaskRow {
  const name = validateQueueName(queue);
  const o = options ?? {};
  if (typeof o !== 'object') throw new InvalidEnqueueOptionsError('options', 'expected an object');
  rejectUnknownOptions(o, ENQUEUE_OPTION_KEYS, failEnqueue, {
    tx:
      parentId === null
        ? "an option of the call, not of a task: enqueueMany takes it as its second argument ({ tx })"
        : "a follow-up is written in its parent's transaction, with the parent's completion",
  });
  const priority = o.priority ?? 0;
  if (!isPriority(priority)) {
    throw new InvalidEnqueueOptionsError('priority', `expected a 32-bit integer, got ${JSON.stringify(priority)}`);
  }
  let runAt: Date | null = null;
  if (o.runAt !== undefined) {
    if (!(o.runAt instanceof Date) || Number.isNaN(o.runAt.getTime())) {
      throw new InvalidEnqueueOptionsError('runAt', 'expected a valid Date');
    }
    const year = o.runAt.getUTCFullYear();
    if (year < 1 || year > 9999) throw new InvalidEnqueueOptionsError('runAt', 'expected a Date between the years 1 and 9999');
    runAt = o.runAt;
  }
  const delayMs = o.delayMs ?? 0;
  if (typeof delayMs !== 'number' || !Number.isFinite(delayMs) || delayMs < 0 || delayMs > MAX_DELAY_MS) {
    throw new InvalidEnqueueOptionsError('delayMs', `expected a number from 0 to ${MAX_DELAY_MS} (100 years), got ${JSON.stringify(delayMs)}`);
  }
  const maxAttempts = o.maxAttempts ?? null;
  if (maxAttempts !== null && (!Number.isInteger(maxAttempts) || maxAttempts < 1 || maxAttempts > 1_000_000)) {
    throw new InvalidEnqueueOptionsError('maxAttempts', `expected an integer in [1, 1000000], got ${JSON.stringify(maxAttempts)}`);
  }
  const dedupKey = optionalText('key', o.key);
  const groupKey = optionalText('group', o.group);
  const partitionKey = optionalText('partition', o.partition);
  const onConflict = o.onConflict ?? 'ignore';
  if (!['ignore', 'replace', 'rerun'].includes(onConflict)) {
    throw new InvalidEnqueueOptionsError('onConflict', `expected 'ignore', 'replace' or 'rerun', got ${JSON.stringify(onConflict)}`);
  }
  if (o.onConflict !== undefined && dedupKey === null) {
    throw new InvalidEnqueueOptionsError('onConflict', 'only applies together with a key');
  }
  const weight = weightOf(o.weight, partitionKey, parentId);
  const tags = tagsOf(o.tags);
  const debounce = debounceOf(o, parentId);
  const dependsOn = dependsOnOf(o, parentId);
  return {
    queue: name,
    payloadJson: serialisePayload(name, payload, limits.maxPayloadBytes),
    priority,
    runAt,
    delayMs: Math.round(delayMs),
    maxAttempts,
    parentId,
    dedupKey,
    groupKey,
    onConflict,
    traceContext,
    partitionKey,
    tags,
    weight,
    debounce,
    dependsOn,
  };
}

/** The most tags a task carries. */
export const MAX_TAGS = 20;

/** The enqueue option `tags`: up to MAX_TAGS distinct text keys, kept in the order given. */
function tagsOf(tags: unknown): string[] | null {
  if (tags === undefined || tags === null) return null;
  if (!Array.isArray(tags) || tags.length > MAX_TAGS) throw new InvalidEnqueueOptionsError('tags', `expected an array of at most ${MAX_TAGS} strings`);
  tags.forEach((tag, i) => {
    if (!isTextKey(tag)) throw new InvalidEnqueueOptionsError(`tags[${i}]`, 'expected a non-empty string of at most 512 characters, without NUL or unpaired UTF-16 surrogates');
    if (tags.indexOf(tag) !== i) throw new InvalidEnqueueOptionsError(`tags[${i}]`, `repeats ${JSON.stringify(tag)}`);
  });
  return tags.length === 0 ? null : [...(tags as string[])];
}

/** Task ids as the operator API takes them: decimal, positive, within bigint. */
const TASK_ID = /^[1-9][0-9]{0,18}$/;
const MAX_PARENTS = 1000;

/**
 * The dependsOn option, checked: ids or `{ item: i }` references to other rows of the same call
 * (enqueueMany) or to earlier follow-ups of the same attempt (ctx.enqueue), resolved at insert.
 */
function dependsOnOf(o: Omit<EnqueueOptions, 'tx'>, parentId: string | null): DependsOnRef[] | null {
  const list = o.dependsOn;
  if (list === undefined) return null;
  if (!Array.isArray(list) || list.length === 0 || list.length > MAX_PARENTS) {
    throw new InvalidEnqueueOptionsError('dependsOn', `expected an array of 1 to ${MAX_PARENTS} task ids`);
  }
  for (const other of ['key', 'debounce'] as const) {
    if (o[other] !== undefined) throw new InvalidEnqueueOptionsError('dependsOn', `does not combine with '${other}'`);
  }
  return list.map((ref, i): DependsOnRef => {
    if (typeof ref === 'string' && ref === parentId) {
      // The enqueuing task: its follow-ups are only inserted once it completes, so this adds nothing.
      throw new InvalidEnqueueOptionsError(`dependsOn[${i}]`, `names the task that enqueues it (${ref}): a follow-up already waits for its parent's completion`);
    }
    if (typeof ref === 'string' && TASK_ID.test(ref) && BigInt(ref) <= 9_223_372_036_854_775_807n) return { id: ref };
    if (ref !== null && typeof ref === 'object' && Number.isInteger((ref as { item: unknown }).item) && (ref as { item: number }).item >= 0) {
      return { item: (ref as { item: number }).item };
    }
    throw new InvalidEnqueueOptionsError(`dependsOn[${i}]`, `expected a task id (a decimal string) or { item: n }, got ${JSON.stringify(ref)}`);
  });
}

/** The debounce option, checked; it sets the due time and the key itself, so it excludes theirs. */
function debounceOf(o: Omit<EnqueueOptions, 'tx'>, parentId: string | null): NewTaskDebounce | null {
  const d = o.debounce;
  if (d === undefined) return null;
  if (d === null || typeof d !== 'object') throw new InvalidEnqueueOptionsError('debounce', 'expected an object');
  if (parentId !== null) throw new InvalidEnqueueOptionsError('debounce', 'is not available to ctx.enqueue (a follow-up commits with its parent)');
  rejectUnknownOptions(d, DEBOUNCE_KEYS, (key, reason) => failEnqueue(`debounce.${key}`, reason));
  for (const other of ['runAt', 'delayMs', 'key', 'onConflict'] as const) {
    if (o[other] !== undefined) throw new InvalidEnqueueOptionsError('debounce', `sets the due time and key itself: remove '${other}'`);
  }
  if (o.group !== undefined) {
    // The burst's task keeps its place in the group while each request pushes it back: every later
    // task of the group would wait for the burst to go quiet.
    throw new InvalidEnqueueOptionsError('debounce', "cannot be combined with 'group': the burst's task would hold back its group while the burst lasts");
  }
  const key = optionalText('debounce.key', d.key);
  if (key === null) throw new InvalidEnqueueOptionsError('debounce.key', 'is required');
  const delayMs = d.delayMs;
  if (!Number.isInteger(delayMs) || delayMs < 1 || delayMs > MAX_DELAY_MS) {
    throw new InvalidEnqueueOptionsError('debounce.delayMs', `expected an integer from 1 to ${MAX_DELAY_MS}, got ${JSON.stringify(delayMs)}`);
  }
  const maxDelayMs = d.maxDelayMs ?? null;
  if (maxDelayMs !== null && (!Number.isInteger(maxDelayMs) || maxDelayMs < delayMs || maxDelayMs > MAX_DELAY_MS)) {
    throw new InvalidEnqueueOptionsError('debounce.maxDelayMs', `expected an integer from delayMs (${delayMs}) to ${MAX_DELAY_MS}, got ${JSON.stringify(maxDelayMs)}`);
  }
  const mode = d.mode ?? 'trailing';
  if (mode !== 'trailing' && mode !== 'leading') {
    throw new InvalidEnqueueOptionsError('debounce.mode', `expected 'trailing' or 'leading', got ${JSON.stringify(mode)}`);
  }
  return { key, delayMs, maxDelayMs, leading: mode === 'leading' };
}

/** The enqueue option `weight`: a partition's, so only with `partition`, and not for a follow-up (its row is written with its parent's completion). */
function weightOf(weight: unknown, partitionKey: string | null, parentId: string | null): number | null {
  if (weight === undefined) return null;
  if (!isWeight(weight)) throw new InvalidEnqueueOptionsError('weight', `expected an integer from 1 to ${WEIGHT_MAX}, got ${JSON.stringify(weight)}`);
  if (partitionKey === null) throw new InvalidEnqueueOptionsError('weight', "is a partition's: set 'partition' too");
  if (parentId !== null) throw new InvalidEnqueueOptionsError('weight', "is not available to ctx.enqueue: set it with a top-level enqueue or the module's partitionWeights");
  return weight;
}

function optionalText(option: string, value: unknown): string | null {
  if (value === undefined || value === null) return null;
  if (!isTextKey(value)) {
    throw new InvalidEnqueueOptionsError(option, 'expected a non-empty string of at most 512 characters, without NUL or unpaired UTF-16 surrogates');
  }
  return value;
}
