import { Injectable, type Provider } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  InvalidArgumentError,
  InvalidEnqueueOptionsError,
  InvalidOptionsError,
  InvalidPayloadError,
  InvalidQueueNameError,
  InvalidScheduleError,
  PayloadTooLargeError,
  PgQueueError,
  PgQueueModule,
  TaskHandler,
  TaskQueue,
  type EnqueueItem,
  type PgQueueModuleOptions,
  type ScheduleDefinition,
} from '@app/pg-queue';
import type { PrismaClient } from '../../src/generated/prisma/client';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

type ErrorClass = abstract new (...args: never[]) => PgQueueError;

interface BadInputCase {
  name: string;
  /** Makes the bad call; the returned promise must reject. */
  run: (queue: TaskQueue, prisma: PrismaClient) => Promise<unknown>;
  error: ErrorClass;
  /** When set, the typed error's `option` / `queue` field (or other fields) must match. */
  fields?: Record<string, unknown>;
}

// The library's API is typed; bad input reaches it from untyped callers, so the casts are the point.
const any = (v: unknown) => v as any;
const cyclic = () => {
  const o: Record<string, unknown> = { id: 1 };
  o.self = o;
  return o;
};
const good = (n: number): EnqueueItem => ({ queue: 'bad.q', payload: { n } });
/** One past bigint's maximum (9223372036854775807): 19 digits, like a real id. */
const PAST_BIGINT = '9223372036854775808';

/**
 * Starts an app the way production does (autoStart), so a schedule that got past validation reaches
 * the database; always closes it again. Resolves only if the app started.
 */
async function boot(prisma: PrismaClient, options: Partial<PgQueueModuleOptions>, providers: Provider[] = []): Promise<void> {
  const moduleRef = await Test.createTestingModule({
    imports: [PgQueueModule.forRoot({ prisma, pollIntervalMs: 200, shutdownTimeoutMs: 1000, ...options })],
    providers,
  }).compile();
  try {
    await moduleRef.init();
  } finally {
    await moduleRef.close().catch(() => undefined);
  }
}
/** Module option `schedules`: a valid schedule first (a partial write would show), then `bad`. */
const withSchedule = (prisma: PrismaClient, bad: unknown) =>
  boot(prisma, { schedules: [{ name: 'fine', queue: 'sched.fine', everyMs: 1000 }, bad as ScheduleDefinition] });
/** A handler whose decorator declares `schedule`. */
const withDecorated = (prisma: PrismaClient, schedule: unknown) => {
  @Injectable()
  class Scheduled {
    @TaskHandler('sched.q', { mode: 'lease', schedule: any(schedule) })
    async run() {}
  }
  return boot(prisma, {}, [Scheduled]);
};

const CASES: BadInputCase[] = [
  // queue names
  { name: 'enqueue: empty queue name', run: (q) => q.enqueue('', {}), error: InvalidQueueNameError, fields: { queue: '' } },
  { name: 'enqueue: queue name with a space', run: (q) => q.enqueue('a b', {}), error: InvalidQueueNameError },
  { name: 'enqueue: 129-character queue name', run: (q) => q.enqueue('q'.repeat(129), {}), error: InvalidQueueNameError },
  { name: 'enqueue: queue name with SQL in it', run: (q) => q.enqueue("x'); DELETE FROM pgqueue.task; --", {}), error: InvalidQueueNameError },
  { name: 'enqueue: numeric queue name', run: (q) => q.enqueue(any(42), {}), error: InvalidQueueNameError, fields: { queue: 42 } },
  { name: 'enqueue: null queue name', run: (q) => q.enqueue(any(null), {}), error: InvalidQueueNameError },

  // payloads
  { name: 'enqueue: payload with a function', run: (q) => q.enqueue('bad.q', { cb: () => 1 }), error: InvalidPayloadError, fields: { queue: 'bad.q' } },
  { name: 'enqueue: payload with a symbol', run: (q) => q.enqueue('bad.q', { s: Symbol('s') }), error: InvalidPayloadError },
  { name: 'enqueue: payload with a BigInt', run: (q) => q.enqueue('bad.q', { amount: 10n }), error: InvalidPayloadError },
  { name: 'enqueue: cyclic payload', run: (q) => q.enqueue('bad.q', cyclic()), error: InvalidPayloadError },
  { name: 'enqueue: payload with NaN', run: (q) => q.enqueue('bad.q', { x: NaN }), error: InvalidPayloadError },
  { name: 'enqueue: payload with Infinity', run: (q) => q.enqueue('bad.q', { x: Infinity }), error: InvalidPayloadError },
  { name: 'enqueue: undefined payload', run: (q) => q.enqueue('bad.q', undefined), error: InvalidPayloadError },
  { name: 'enqueue: payload with U+0000 in a string', run: (q) => q.enqueue('bad.q', { s: 'a\u0000b' }), error: InvalidPayloadError },
  { name: 'enqueue: payload with U+0000 in a key', run: (q) => q.enqueue('bad.q', { ['k\u0000']: 1 }), error: InvalidPayloadError },
  {
    name: 'enqueue: payload over maxPayloadBytes (default 256 KiB)',
    run: (q) => q.enqueue('bad.q', { blob: 'x'.repeat(256 * 1024) }),
    error: PayloadTooLargeError,
    fields: { queue: 'bad.q', bytes: 256 * 1024 + '{"blob":""}'.length, limit: 256 * 1024 },
  },

  // options
  { name: 'enqueue: fractional priority', run: (q) => q.enqueue('bad.q', {}, { priority: 1.5 }), error: InvalidEnqueueOptionsError, fields: { option: 'priority' } },
  { name: 'enqueue: priority over int32', run: (q) => q.enqueue('bad.q', {}, { priority: 2 ** 31 }), error: InvalidEnqueueOptionsError, fields: { option: 'priority' } },
  { name: 'enqueue: invalid Date as runAt', run: (q) => q.enqueue('bad.q', {}, { runAt: new Date('not a date') }), error: InvalidEnqueueOptionsError, fields: { option: 'runAt' } },
  { name: 'enqueue: string as runAt', run: (q) => q.enqueue('bad.q', {}, { runAt: any('2030-01-01') }), error: InvalidEnqueueOptionsError, fields: { option: 'runAt' } },
  { name: 'enqueue: negative delayMs', run: (q) => q.enqueue('bad.q', {}, { delayMs: -1 }), error: InvalidEnqueueOptionsError, fields: { option: 'delayMs' } },
  { name: 'enqueue: NaN delayMs', run: (q) => q.enqueue('bad.q', {}, { delayMs: NaN }), error: InvalidEnqueueOptionsError, fields: { option: 'delayMs' } },
  { name: 'enqueue: maxAttempts 0', run: (q) => q.enqueue('bad.q', {}, { maxAttempts: 0 }), error: InvalidEnqueueOptionsError, fields: { option: 'maxAttempts' } },
  { name: 'enqueue: empty key', run: (q) => q.enqueue('bad.q', {}, { key: '' }), error: InvalidEnqueueOptionsError, fields: { option: 'key' } },
  { name: 'enqueue: key with a lone UTF-16 surrogate', run: (q) => q.enqueue('bad.q', {}, { key: 'k\udc00' }), error: InvalidEnqueueOptionsError, fields: { option: 'key' } },
  { name: 'enqueue: group with a lone UTF-16 surrogate', run: (q) => q.enqueue('bad.q', {}, { group: '\ud800g' }), error: InvalidEnqueueOptionsError, fields: { option: 'group' } },
  { name: 'enqueue: onConflict without a key', run: (q) => q.enqueue('bad.q', {}, { onConflict: 'replace' }), error: InvalidEnqueueOptionsError, fields: { option: 'onConflict' } },
  { name: 'enqueue: tx that is not a transaction client', run: (q) => q.enqueue('bad.q', {}, { tx: {} }), error: InvalidEnqueueOptionsError, fields: { option: 'tx' } },

  // inside the caller's transaction
  {
    name: 'enqueue with { tx } inside prisma.$transaction: bad payload',
    run: (q, prisma) =>
      prisma.$transaction(async (tx) => {
        await tx.order.create({ data: { customer: 'in-tx', amountCents: 1 } });
        await q.enqueue('bad.q', { ok: 1 }, { tx });
        await q.enqueue('bad.q', { amount: 10n }, { tx });
      }),
    error: InvalidPayloadError,
  },

  // enqueueMany: all or nothing
  { name: 'enqueueMany: items not an array', run: (q) => q.enqueueMany(any({ queue: 'bad.q', payload: {} })), error: InvalidEnqueueOptionsError, fields: { option: 'items' } },
  { name: 'enqueueMany: a null item', run: (q) => q.enqueueMany([good(1), any(null)]), error: InvalidQueueNameError },
  { name: 'enqueueMany: last of 3 has a bad payload', run: (q) => q.enqueueMany([good(1), good(2), { queue: 'bad.q', payload: { f: () => 3 } }]), error: InvalidPayloadError },
  { name: 'enqueueMany: last of 3 has a bad queue name', run: (q) => q.enqueueMany([good(1), good(2), { queue: 'bad q', payload: {} }]), error: InvalidQueueNameError },
  {
    name: 'enqueueMany: last of 3 has a bad option',
    run: (q) => q.enqueueMany([good(1), good(2), { queue: 'bad.q', payload: {}, options: { maxAttempts: 0 } }]),
    error: InvalidEnqueueOptionsError,
    fields: { option: 'maxAttempts' },
  },
  {
    name: 'enqueueMany: last of 3 too large',
    run: (q) => q.enqueueMany([good(1), good(2), { queue: 'bad.q', payload: 'x'.repeat(300 * 1024) }]),
    error: PayloadTooLargeError,
  },
  {
    name: 'enqueueMany: last of 3 keyed items has a bad key (a keyed batch runs several statements)',
    run: (q) =>
      q.enqueueMany([
        { queue: 'bad.q', payload: {}, options: { key: 'k1' } },
        { queue: 'bad.q', payload: {}, options: { key: 'k2', onConflict: 'replace' } },
        { queue: 'bad.q', payload: {}, options: { key: 'k'.repeat(513) } },
      ]),
    error: InvalidEnqueueOptionsError,
    fields: { option: 'key' },
  },
  {
    name: 'enqueueMany with { tx }: last of 3 is bad',
    run: (q, prisma) =>
      prisma.$transaction(async (tx) => {
        await tx.order.create({ data: { customer: 'in-tx', amountCents: 1 } });
        await q.enqueueMany([good(1), good(2), { queue: 'bad.q', payload: { n: NaN } }], { tx });
      }),
    error: InvalidPayloadError,
  },

  // Inputs that pass the JavaScript checks but that Postgres refuses: the caller should still get a
  // typed error naming the field, not a driver error from the middle of the insert.
  { name: 'enqueue: payload with a lone UTF-16 surrogate (jsonb rejects \\ud800)', run: (q) => q.enqueue('bad.q', { s: '\ud800' }), error: InvalidPayloadError },
  { name: 'enqueue: delayMs beyond the timestamp range (1e16 ms ≈ 317,000 years)', run: (q) => q.enqueue('bad.q', {}, { delayMs: 1e16 }), error: InvalidEnqueueOptionsError, fields: { option: 'delayMs' } },
  { name: 'enqueue: delayMs beyond bigint (1e21)', run: (q) => q.enqueue('bad.q', {}, { delayMs: 1e21 }), error: InvalidEnqueueOptionsError, fields: { option: 'delayMs' } },
  // Date#toISOString writes years past 9999 as "+010000-…", which Postgres cannot parse.
  { name: 'enqueue: runAt in the year 10000', run: (q) => q.enqueue('bad.q', {}, { runAt: new Date('+010000-01-01T00:00:00Z') }), error: InvalidEnqueueOptionsError, fields: { option: 'runAt' } },
  { name: 'enqueue: runAt at the earliest JS Date (year -271821, before Postgres\' 4713 BC)', run: (q) => q.enqueue('bad.q', {}, { runAt: new Date(-8.64e15) }), error: InvalidEnqueueOptionsError, fields: { option: 'runAt' } },

  // Operator API: ids are bigint as decimal strings; anything else is refused before any SQL runs.
  { name: 'get: non-numeric id', run: (q) => q.get('abc'), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'get: negative id', run: (q) => q.get('-1'), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'get: id beyond bigint (20 digits)', run: (q) => q.get('99999999999999999999'), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'get: 19-digit id one past bigint\'s maximum', run: (q) => q.get(PAST_BIGINT), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'get: id with surrounding whitespace', run: (q) => q.get(' 1 '), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'get: id with a leading zero', run: (q) => q.get('01'), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'get: number instead of a string', run: (q) => q.get(any(1)), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'get: id with U+0000', run: (q) => q.get('1\u0000'), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'cancel: non-numeric id', run: (q) => q.cancel('abc'), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'cancel: 19-digit id one past bigint\'s maximum', run: (q) => q.cancel(PAST_BIGINT), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'cancel: number instead of a string', run: (q) => q.cancel(any(5)), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'retry: negative id', run: (q) => q.retry('-5'), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'retry: id 9999999999999999999 (19 nines, beyond bigint)', run: (q) => q.retry('9999999999999999999'), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'retry: id with a trailing newline', run: (q) => q.retry('1\n'), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'setPriority: non-numeric id', run: (q) => q.setPriority('x', 1), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'setPriority: id with leading zeros', run: (q) => q.setPriority('00012', 1), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'setPriority: 19-digit id one past bigint\'s maximum', run: (q) => q.setPriority(PAST_BIGINT, 1), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'setPriority: priority beyond int32', run: (q) => q.setPriority('1', 2 ** 31), error: InvalidArgumentError, fields: { argument: 'priority' } },
  { name: 'setPriority: fractional priority', run: (q) => q.setPriority('1', 0.5), error: InvalidArgumentError, fields: { argument: 'priority' } },
  { name: 'chain: fractional id', run: (q) => q.chain('1.5'), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'chain: id beyond bigint (20 digits)', run: (q) => q.chain('99999999999999999999'), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'chain: 19-digit id one past bigint\'s maximum', run: (q) => q.chain(PAST_BIGINT), error: InvalidArgumentError, fields: { argument: 'id' } },
  { name: 'chain: BigInt instead of a string', run: (q) => q.chain(any(1n)), error: InvalidArgumentError, fields: { argument: 'id' } },

  // list: limit is an integer in [1, 10000]
  { name: 'list: negative limit', run: (q) => q.list({ limit: -1 }), error: InvalidArgumentError, fields: { argument: 'limit' } },
  { name: 'list: limit 0', run: (q) => q.list({ limit: 0 }), error: InvalidArgumentError, fields: { argument: 'limit' } },
  { name: 'list: huge limit', run: (q) => q.list({ limit: 1e12 }), error: InvalidArgumentError, fields: { argument: 'limit' } },
  { name: 'list: fractional limit', run: (q) => q.list({ limit: 2.5 }), error: InvalidArgumentError, fields: { argument: 'limit' } },
  { name: 'list: NaN limit', run: (q) => q.list({ limit: NaN }), error: InvalidArgumentError, fields: { argument: 'limit' } },
  { name: 'list: limit as a string', run: (q) => q.list({ limit: any('10') }), error: InvalidArgumentError, fields: { argument: 'limit' } },
  { name: 'list: garbage cursor', run: (q) => q.list({ cursor: 'next-page' }), error: InvalidArgumentError, fields: { argument: 'cursor' } },
  { name: 'list: cursor one past bigint\'s maximum', run: (q) => q.list({ cursor: PAST_BIGINT }), error: InvalidArgumentError, fields: { argument: 'cursor' } },
  { name: 'list: unknown state', run: (q) => q.list({ state: any('finished') }), error: InvalidArgumentError, fields: { argument: 'state' } },
  { name: 'list: state with U+0000', run: (q) => q.list({ state: any('dead\u0000') }), error: InvalidArgumentError, fields: { argument: 'state' } },
  { name: 'list: bad queue name', run: (q) => q.list({ queue: 'no spaces' }), error: InvalidQueueNameError, fields: { queue: 'no spaces' } },
  { name: 'list: queue name with U+0000', run: (q) => q.list({ queue: 'q\u0000' }), error: InvalidQueueNameError },
  { name: 'list: null filter', run: (q) => q.list(any(null)), error: InvalidArgumentError, fields: { argument: 'filter' } },

  // topErrors: the same limit rules as list
  { name: 'topErrors: negative limit', run: (q) => q.topErrors('bad.q', -1), error: InvalidArgumentError, fields: { argument: 'limit' } },
  { name: 'topErrors: limit 0', run: (q) => q.topErrors('bad.q', 0), error: InvalidArgumentError, fields: { argument: 'limit' } },
  { name: 'topErrors: fractional limit', run: (q) => q.topErrors('bad.q', 1.5), error: InvalidArgumentError, fields: { argument: 'limit' } },
  { name: 'topErrors: NaN limit', run: (q) => q.topErrors('bad.q', NaN), error: InvalidArgumentError, fields: { argument: 'limit' } },
  { name: 'topErrors: huge limit', run: (q) => q.topErrors('bad.q', 1e12), error: InvalidArgumentError, fields: { argument: 'limit' } },
  { name: 'topErrors: null limit (would mean no limit)', run: (q) => q.topErrors('bad.q', any(null)), error: InvalidArgumentError, fields: { argument: 'limit' } },
  { name: 'topErrors: bad queue name', run: (q) => q.topErrors('a b'), error: InvalidQueueNameError, fields: { queue: 'a b' } },

  // retryDead
  { name: 'retryDead: bad queue name', run: (q) => q.retryDead({ queue: 'x y' }), error: InvalidQueueNameError, fields: { queue: 'x y' } },
  { name: 'retryDead: queue name with U+0000', run: (q) => q.retryDead({ queue: 'q\u0000' }), error: InvalidQueueNameError },
  { name: 'retryDead: numeric errorLike', run: (q) => q.retryDead({ queue: 'bad.q', errorLike: any(42) }), error: InvalidArgumentError, fields: { argument: 'errorLike' } },
  { name: 'retryDead: object errorLike', run: (q) => q.retryDead({ queue: 'bad.q', errorLike: any({ like: '%x%' }) }), error: InvalidArgumentError, fields: { argument: 'errorLike' } },
  { name: 'retryDead: errorLike with U+0000', run: (q) => q.retryDead({ queue: 'bad.q', errorLike: '%smtp\u0000%' }), error: InvalidArgumentError, fields: { argument: 'errorLike' } },
  { name: 'retryDead: no filter', run: (q) => q.retryDead(any(undefined)), error: InvalidArgumentError, fields: { argument: 'filter' } },

  // hourly
  { name: 'hourly: invalid Date', run: (q) => q.hourly({ since: new Date('yesterday') }), error: InvalidArgumentError, fields: { argument: 'since' } },
  { name: 'hourly: since as a string', run: (q) => q.hourly({ since: any('2024-01-01') }), error: InvalidArgumentError, fields: { argument: 'since' } },
  { name: 'hourly: since in the year 10000', run: (q) => q.hourly({ since: new Date('+010000-01-01T00:00:00Z') }), error: InvalidArgumentError, fields: { argument: 'since' } },
  { name: 'hourly: queue name with U+0000', run: (q) => q.hourly({ queue: 'q\u0000' }), error: InvalidQueueNameError },

  // a filter key the call does not take (a misspelling would otherwise widen the filter)
  { name: 'purge: misspelled queue key', run: (q) => q.purge(any({ queu: 'bad.q', states: ['done'], olderThanMs: 0 })), error: InvalidArgumentError, fields: { argument: 'filter.queu' } },
  { name: 'list: misspelled state key', run: (q) => q.list(any({ stat: 'dead' })), error: InvalidArgumentError, fields: { argument: 'filter.stat' } },
  { name: 'retryDead: misspelled errorLike key', run: (q) => q.retryDead(any({ queue: 'bad.q', errorlike: '%x%' })), error: InvalidArgumentError, fields: { argument: 'filter.errorlike' } },
  { name: 'hourly: unknown key', run: (q) => q.hourly(any({ queues: ['bad.q'] })), error: InvalidArgumentError, fields: { argument: 'filter.queues' } },
  { name: 'purge: filter as an array', run: (q) => q.purge(any([])), error: InvalidArgumentError, fields: { argument: 'filter' } },

  // huge keys and groups (limit 512 characters), and U+0000 anywhere in text
  { name: 'enqueue: 513-character key', run: (q) => q.enqueue('bad.q', {}, { key: 'k'.repeat(513) }), error: InvalidEnqueueOptionsError, fields: { option: 'key' } },
  { name: 'enqueue: 10 000-character key', run: (q) => q.enqueue('bad.q', {}, { key: 'k'.repeat(10_000) }), error: InvalidEnqueueOptionsError, fields: { option: 'key' } },
  { name: 'enqueue: 513-character group', run: (q) => q.enqueue('bad.q', {}, { group: 'g'.repeat(513) }), error: InvalidEnqueueOptionsError, fields: { option: 'group' } },
  { name: 'enqueue: 10 000-character group', run: (q) => q.enqueue('bad.q', {}, { group: 'g'.repeat(10_000) }), error: InvalidEnqueueOptionsError, fields: { option: 'group' } },
  { name: 'enqueue: key with U+0000', run: (q) => q.enqueue('bad.q', {}, { key: 'k\u0000' }), error: InvalidEnqueueOptionsError, fields: { option: 'key' } },
  { name: 'enqueue: group with U+0000', run: (q) => q.enqueue('bad.q', {}, { group: '\u0000' }), error: InvalidEnqueueOptionsError, fields: { option: 'group' } },
  { name: 'enqueue: queue name with U+0000', run: (q) => q.enqueue('bad\u0000q', {}), error: InvalidQueueNameError },
  { name: 'enqueue: payload with U+0000 in a nested array string', run: (q) => q.enqueue('bad.q', { a: [{ b: ['ok', 'x\u0000'] }] }), error: InvalidPayloadError },
  {
    name: 'enqueueMany: last of 3 has a group with U+0000',
    run: (q) => q.enqueueMany([good(1), good(2), { queue: 'bad.q', payload: {}, options: { group: 'g\u0000' } }]),
    error: InvalidEnqueueOptionsError,
    fields: { option: 'group' },
  },

  // Schedules in the module option `schedules` (validated at startup, before any is written)
  { name: 'schedules[1]: bad cron', run: (_q, p) => withSchedule(p, { queue: 'sched.q', cron: '61 * * * *' }), error: InvalidScheduleError, fields: { option: 'schedules[1].cron', where: undefined } },
  { name: 'schedules[1]: cron that never fires (30 February)', run: (_q, p) => withSchedule(p, { queue: 'sched.q', cron: '0 0 30 2 *' }), error: InvalidScheduleError, fields: { option: 'schedules[1].cron' } },
  { name: 'schedules[1]: cron with U+0000', run: (_q, p) => withSchedule(p, { queue: 'sched.q', cron: '* * * * *\u0000' }), error: InvalidScheduleError, fields: { option: 'schedules[1].cron' } },
  { name: 'schedules[1]: numeric cron', run: (_q, p) => withSchedule(p, { queue: 'sched.q', cron: 5 }), error: InvalidScheduleError, fields: { option: 'schedules[1].cron' } },
  { name: 'schedules[1]: both cron and everyMs', run: (_q, p) => withSchedule(p, { queue: 'sched.q', cron: '* * * * *', everyMs: 1000 }), error: InvalidScheduleError, fields: { option: 'schedules[1].cron' } },
  { name: 'schedules[1]: neither cron nor everyMs', run: (_q, p) => withSchedule(p, { queue: 'sched.q' }), error: InvalidScheduleError, fields: { option: 'schedules[1].cron' } },
  { name: 'schedules[1]: negative everyMs', run: (_q, p) => withSchedule(p, { queue: 'sched.q', everyMs: -1000 }), error: InvalidScheduleError, fields: { option: 'schedules[1].everyMs' } },
  { name: 'schedules[1]: everyMs 0', run: (_q, p) => withSchedule(p, { queue: 'sched.q', everyMs: 0 }), error: InvalidScheduleError, fields: { option: 'schedules[1].everyMs' } },
  { name: 'schedules[1]: fractional everyMs', run: (_q, p) => withSchedule(p, { queue: 'sched.q', everyMs: 1500.5 }), error: InvalidScheduleError, fields: { option: 'schedules[1].everyMs' } },
  { name: 'schedules[1]: everyMs 1e20 (beyond Date and bigint)', run: (_q, p) => withSchedule(p, { queue: 'sched.q', everyMs: 1e20 }), error: InvalidScheduleError, fields: { option: 'schedules[1].everyMs' } },
  { name: 'schedules[1]: everyMs 1e15 (first tick in the year 65000)', run: (_q, p) => withSchedule(p, { queue: 'sched.q', everyMs: 1e15 }), error: InvalidScheduleError, fields: { option: 'schedules[1].everyMs' } },
  { name: 'schedules[1]: unknown time zone', run: (_q, p) => withSchedule(p, { queue: 'sched.q', cron: '* * * * *', tz: 'Mars/Olympus' }), error: InvalidScheduleError, fields: { option: 'schedules[1].tz' } },
  { name: 'schedules[1]: empty time zone', run: (_q, p) => withSchedule(p, { queue: 'sched.q', cron: '* * * * *', tz: '' }), error: InvalidScheduleError, fields: { option: 'schedules[1].tz' } },
  { name: 'schedules[1]: numeric time zone', run: (_q, p) => withSchedule(p, { queue: 'sched.q', cron: '* * * * *', tz: 42 }), error: InvalidScheduleError, fields: { option: 'schedules[1].tz' } },
  { name: 'schedules[1]: tz with everyMs', run: (_q, p) => withSchedule(p, { queue: 'sched.q', everyMs: 1000, tz: 'UTC' }), error: InvalidScheduleError, fields: { option: 'schedules[1].tz' } },
  { name: "schedules[1]: missed 'twice'", run: (_q, p) => withSchedule(p, { queue: 'sched.q', everyMs: 1000, missed: 'twice' }), error: InvalidScheduleError, fields: { option: 'schedules[1].missed' } },
  { name: 'schedules[1]: empty name', run: (_q, p) => withSchedule(p, { queue: 'sched.q', everyMs: 1000, name: '' }), error: InvalidScheduleError, fields: { option: 'schedules[1].name' } },
  { name: 'schedules[1]: numeric name', run: (_q, p) => withSchedule(p, { queue: 'sched.q', everyMs: 1000, name: 7 }), error: InvalidScheduleError, fields: { option: 'schedules[1].name' } },
  { name: 'schedules[1]: name with U+0000', run: (_q, p) => withSchedule(p, { queue: 'sched.q', everyMs: 1000, name: 'nightly\u0000' }), error: InvalidScheduleError, fields: { option: 'schedules[1].name' } },
  { name: 'schedules[1]: bad queue name', run: (_q, p) => withSchedule(p, { queue: 'sched q', everyMs: 1000 }), error: InvalidScheduleError, fields: { option: 'schedules[1].queue' } },
  { name: 'schedules[1]: queue name with U+0000', run: (_q, p) => withSchedule(p, { queue: 'sched\u0000', everyMs: 1000 }), error: InvalidScheduleError, fields: { option: 'schedules[1].queue' } },
  { name: 'schedules[1]: payload with a function', run: (_q, p) => withSchedule(p, { queue: 'sched.q', everyMs: 1000, payload: { f: () => 1 } }), error: InvalidScheduleError, fields: { option: 'schedules[1].payload' } },
  { name: 'schedules[1]: payload with U+0000 in a value', run: (_q, p) => withSchedule(p, { queue: 'sched.q', everyMs: 1000, payload: { s: 'a\u0000' } }), error: InvalidScheduleError, fields: { option: 'schedules[1].payload' } },
  { name: 'schedules[1]: payload with U+0000 in a key', run: (_q, p) => withSchedule(p, { queue: 'sched.q', everyMs: 1000, payload: { ['k\u0000']: 1 } }), error: InvalidScheduleError, fields: { option: 'schedules[1].payload' } },
  { name: 'schedules[1]: null entry', run: (_q, p) => withSchedule(p, null), error: InvalidScheduleError, fields: { option: 'schedules[1]' } },

  // Schedules on a handler: @TaskHandler(queue, { schedule })
  { name: '@TaskHandler schedule: bad cron', run: (_q, p) => withDecorated(p, { cron: 'every minute' }), error: InvalidScheduleError, fields: { option: '@TaskHandler("sched.q").schedule.cron', where: 'Scheduled.run' } },
  { name: '@TaskHandler schedule: both cron and everyMs', run: (_q, p) => withDecorated(p, { cron: '* * * * *', everyMs: 1000 }), error: InvalidScheduleError, fields: { option: '@TaskHandler("sched.q").schedule.cron' } },
  { name: '@TaskHandler schedule: neither cron nor everyMs', run: (_q, p) => withDecorated(p, { payload: {} }), error: InvalidScheduleError, fields: { option: '@TaskHandler("sched.q").schedule.cron' } },
  { name: '@TaskHandler schedule: everyMs 0', run: (_q, p) => withDecorated(p, { everyMs: 0 }), error: InvalidScheduleError, fields: { option: '@TaskHandler("sched.q").schedule.everyMs' } },
  { name: '@TaskHandler schedule: negative everyMs', run: (_q, p) => withDecorated(p, { everyMs: -1 }), error: InvalidScheduleError, fields: { option: '@TaskHandler("sched.q").schedule.everyMs' } },
  { name: '@TaskHandler schedule: fractional everyMs', run: (_q, p) => withDecorated(p, { everyMs: 999.9 }), error: InvalidScheduleError, fields: { option: '@TaskHandler("sched.q").schedule.everyMs' } },
  { name: '@TaskHandler schedule: huge everyMs', run: (_q, p) => withDecorated(p, { everyMs: Number.MAX_SAFE_INTEGER }), error: InvalidScheduleError, fields: { option: '@TaskHandler("sched.q").schedule.everyMs' } },
  { name: '@TaskHandler schedule: unknown time zone', run: (_q, p) => withDecorated(p, { cron: '0 * * * *', tz: 'Europe/Atlantis' }), error: InvalidScheduleError, fields: { option: '@TaskHandler("sched.q").schedule.tz' } },
  { name: '@TaskHandler schedule: empty time zone', run: (_q, p) => withDecorated(p, { cron: '0 * * * *', tz: '' }), error: InvalidScheduleError, fields: { option: '@TaskHandler("sched.q").schedule.tz' } },
  { name: "@TaskHandler schedule: missed 'all'", run: (_q, p) => withDecorated(p, { everyMs: 1000, missed: 'all' }), error: InvalidScheduleError, fields: { option: '@TaskHandler("sched.q").schedule.missed' } },
  { name: '@TaskHandler schedule: 201-character name', run: (_q, p) => withDecorated(p, { everyMs: 1000, name: 'n'.repeat(201) }), error: InvalidScheduleError, fields: { option: '@TaskHandler("sched.q").schedule.name' } },
  { name: '@TaskHandler schedule: name with U+0000', run: (_q, p) => withDecorated(p, { everyMs: 1000, name: '\u0000' }), error: InvalidScheduleError, fields: { option: '@TaskHandler("sched.q").schedule.name' } },
  { name: '@TaskHandler schedule: payload with a BigInt', run: (_q, p) => withDecorated(p, { everyMs: 1000, payload: { n: 1n } }), error: InvalidScheduleError, fields: { option: '@TaskHandler("sched.q").schedule.payload' } },
  { name: '@TaskHandler schedule: payload with U+0000', run: (_q, p) => withDecorated(p, { everyMs: 1000, payload: ['\u0000'] }), error: InvalidScheduleError, fields: { option: '@TaskHandler("sched.q").schedule.payload' } },
  { name: '@TaskHandler schedule: payload over 64 KiB', run: (_q, p) => withDecorated(p, { everyMs: 1000, payload: 'x'.repeat(65 * 1024) }), error: InvalidScheduleError, fields: { option: '@TaskHandler("sched.q").schedule.payload' } },
];

describe('bad input to enqueue, the operator API and schedules (real Postgres)', () => {
  let db: TestDatabase;
  let prisma: PrismaClient;
  let qa: QueueApp;

  beforeAll(async () => {
    db = await createTestDatabase();
    prisma = db.prisma();
    qa = await bootQueueApp(prisma, [], { autoStart: false });
  });
  afterAll(async () => {
    await qa?.close();
    await db?.drop();
  });
  beforeEach(async () => {
    await db.sql('TRUNCATE orders CASCADE');
    await db.sql('TRUNCATE pgqueue.task, pgqueue.task_archive, pgqueue.schedule');
  });

  const taskCount = async () => (await db.sql<{ n: number }>('SELECT count(*)::int AS n FROM pgqueue.task'))[0].n;
  const scheduleCount = async () => (await db.sql<{ n: number }>('SELECT count(*)::int AS n FROM pgqueue.schedule'))[0].n;
  const orderCount = async () => (await db.sql<{ n: number }>('SELECT count(*)::int AS n FROM orders'))[0].n;

  it('control: valid input is written (so the zero counts below mean something)', async () => {
    await qa.queue.enqueue('bad.q', { n: 0 });
    await qa.queue.enqueueMany([good(1), good(2), good(3)]);
    await prisma.$transaction(async (tx) => {
      await tx.order.create({ data: { customer: 'ok', amountCents: 1 } });
      await qa.queue.enqueue('bad.q', { n: 4 }, { tx });
    });
    expect(await taskCount()).toBe(5);
    expect(await orderCount()).toBe(1);
  });

  it('control: valid operator calls and schedules go through', async () => {
    const id = await qa.queue.enqueue('bad.q', {});
    expect(await qa.queue.setPriority(id, -(2 ** 31))).toBe(true); // int32's minimum is a priority
    expect(await qa.queue.list({ limit: 10_000, cursor: '9223372036854775807' })).toHaveLength(1);
    expect(await qa.queue.topErrors('bad.q', 10_000)).toEqual([]);
    expect(await qa.queue.retryDead({ queue: 'bad.q', errorLike: '%x%' })).toEqual([]);
    expect(await qa.queue.hourly({ since: new Date('0001-01-01T00:00:00Z') })).toEqual([]);
    await withSchedule(prisma, { queue: 'sched.other', cron: '0 * * * *', tz: 'Europe/Berlin', payload: { s: '\\u0000 escaped is fine' } });
    await withDecorated(prisma, { everyMs: 365 * 86_400_000, name: 'yearly' });
    expect((await db.sql('SELECT name FROM pgqueue.schedule ORDER BY name')).map((r) => r.name)).toEqual(['fine', 'sched.other', 'yearly']);
  });

  it.each(CASES)('$name → $error.name, nothing written', async ({ run, error, fields }) => {
    let pending: Promise<unknown>;
    try {
      pending = run(qa.queue, prisma);
    } catch (e) {
      // every call here returns a promise: a throw before it escapes the caller's .catch()
      throw new Error(`expected a rejected promise, but the call threw synchronously: ${(e as Error)?.constructor?.name}: ${(e as Error)?.message}`);
    }
    const err = await pending.then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).not.toBeNull();
    if (!(err instanceof error)) {
      // show what came back instead of the typed error
      throw new Error(`expected ${error.name}, got ${(err as Error)?.constructor?.name}: ${(err as Error)?.message}`);
    }
    expect(err).toBeInstanceOf(PgQueueError);
    if (fields) expect(err).toMatchObject(fields);
    expect(await taskCount()).toBe(0);
    expect(await scheduleCount()).toBe(0);
    // the caller's own writes in the same transaction rolled back with it
    expect(await orderCount()).toBe(0);
  });

  it('the queue still works after all that bad input', async () => {
    for (const c of CASES) await Promise.resolve().then(() => c.run(qa.queue, prisma)).catch(() => undefined);
    expect(await taskCount()).toBe(0);
    expect(await scheduleCount()).toBe(0);
    const id = await qa.queue.enqueue('bad.q', { after: true });
    expect(await qa.queue.get(id)).toMatchObject({ queue: 'bad.q', state: 'pending', payload: { after: true } });
  });
});

describe('hostile schema names (real Postgres)', () => {
  let db: TestDatabase;
  let prisma: PrismaClient;

  beforeAll(async () => {
    db = await createTestDatabase();
    prisma = db.prisma();
  });
  afterAll(() => db?.drop());

  /** compile + init, as an app would start; resolves with the app or rejects with the startup error. */
  const start = async (options: Partial<PgQueueModuleOptions>) => {
    const moduleRef = await Test.createTestingModule({
      imports: [PgQueueModule.forRoot({ prisma, autoStart: false, ...options })],
    }).compile();
    return moduleRef.init();
  };

  it('forRoot with schema "x; DROP TABLE orders; --" fails at startup with InvalidOptionsError naming "schema", and runs no SQL', async () => {
    await db.sql("INSERT INTO orders (customer, amount_cents, updated_at) VALUES ('survivor', 100, now())");
    const schemasBefore = await db.sql('SELECT nspname FROM pg_namespace ORDER BY 1');

    const err = await start({ schema: 'x; DROP TABLE orders; --' }).then(
      async (app) => {
        await app.close();
        return null;
      },
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(InvalidOptionsError);
    expect((err as InvalidOptionsError).option).toBe('schema');
    expect((err as Error).message).toMatch(/^pg-queue: invalid option schema: /);

    const [orders] = await db.sql("SELECT to_regclass('public.orders')::text AS t");
    expect(orders.t).toBe('orders');
    expect(await db.sql('SELECT customer FROM orders')).toEqual([{ customer: 'survivor' }]);
    // nothing was created either
    expect(await db.sql('SELECT nspname FROM pg_namespace ORDER BY 1')).toEqual(schemasBefore);
  });

  it.each(['Robert"; DROP TABLE orders;--', 'public', 'pg_x', '', 'UPPER', 'x'.repeat(64)])(
    'forRoot with schema %p fails at startup with InvalidOptionsError',
    async (schema) => {
      await expect(start({ schema })).rejects.toBeInstanceOf(InvalidOptionsError);
      const [orders] = await db.sql("SELECT to_regclass('public.orders')::text AS t");
      expect(orders.t).toBe('orders');
    },
  );

  // The NOTIFY channel is `${schema}_task_ready`, which must fit Postgres' 63-byte identifiers:
  // the validator caps schema names at 48 characters, and the longest allowed one works end to end.
  it('a 63-character schema name is refused at startup', async () => {
    await expect(start({ schema: 's'.repeat(63) })).rejects.toThrow(/invalid option schema: /);
  });

  it('a 48-character schema name (the longest allowed) can enqueue', async () => {
    const schema = 's'.repeat(48);
    const app = await start({ schema });
    try {
      const id = await app.get(TaskQueue).enqueue('long.q', { ok: true });
      expect(await app.get(TaskQueue).get(id)).toMatchObject({ queue: 'long.q', state: 'pending' });
    } finally {
      await app.close();
    }
  });
});
