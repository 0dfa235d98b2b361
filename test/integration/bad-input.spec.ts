import { Test } from '@nestjs/testing';
import {
  InvalidEnqueueOptionsError,
  InvalidOptionsError,
  InvalidPayloadError,
  InvalidQueueNameError,
  PayloadTooLargeError,
  PgQueueError,
  PgQueueModule,
  TaskQueue,
  type EnqueueItem,
  type PgQueueModuleOptions,
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
];

describe('bad input to enqueue / enqueueMany (real Postgres)', () => {
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
    await db.sql('TRUNCATE pgqueue.task, pgqueue.task_archive');
  });

  const taskCount = async () => (await db.sql<{ n: number }>('SELECT count(*)::int AS n FROM pgqueue.task'))[0].n;
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

  it.each(CASES)('$name → $error.name, nothing written', async ({ run, error, fields }) => {
    const err = await run(qa.queue, prisma).then(
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
    // the caller's own writes in the same transaction rolled back with it
    expect(await orderCount()).toBe(0);
  });

  it('the queue still works after all that bad input', async () => {
    for (const c of CASES) await c.run(qa.queue, prisma).catch(() => undefined);
    expect(await taskCount()).toBe(0);
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
    expect((err as Error).message).toContain('"schema"');

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
    await expect(start({ schema: 's'.repeat(63) })).rejects.toThrow(/invalid option "schema"/);
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
