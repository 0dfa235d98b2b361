import { HandlerConfigurationError, InvalidOptionsError } from './errors';
import {
  DEFAULT_HANDLER_OPTIONS,
  resolveHandlerOptions,
  resolveModuleOptions,
  type HandlerOptions,
  type PgQueueModuleOptions,
} from './pg-queue.options';
import type { PrismaClientLike } from './types';

/** Enough of a PrismaClient for option resolution (which never runs a query). */
const fakePrisma = (): PrismaClientLike => ({
  $queryRawUnsafe: async () => [] as never,
  $executeRawUnsafe: async () => 0,
  $transaction: async (fn) => fn({}),
  $disconnect: async () => undefined,
});

const resolve = (over: Record<string, unknown>) => resolveModuleOptions({ prisma: fakePrisma(), ...over } as PgQueueModuleOptions);

/** The error thrown by `fn`, or a failure when it does not throw. */
function thrown(fn: () => unknown): Error {
  try {
    fn();
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a throw, but the call returned');
}

describe('resolveModuleOptions', () => {
  it('applies the defaults', () => {
    const prisma = fakePrisma();
    const o = resolveModuleOptions({ prisma });
    expect(o).toMatchObject({
      prisma,
      readPrisma: prisma,
      databaseUrl: undefined,
      schema: 'pgqueue',
      autoStart: true,
      pollIntervalMs: 2000,
      listenPollIntervalMs: 30_000,
      shutdownTimeoutMs: 10_000,
      installSchema: true,
      maxPayloadBytes: 256 * 1024,
      maxErrorBytes: 2048,
      finished: 'archive',
      rescueIntervalMs: 10_000,
      queues: {},
      schedules: [],
    });
    expect(o.handlerDefaults).toEqual(DEFAULT_HANDLER_OPTIONS);
    expect(o.workerId).toMatch(/^.+:\d+:[0-9a-f]{6}$/);
  });

  it("sizes the archive's partitions from its retention: a quarter of it, from a minute to a day", () => {
    expect(resolve({}).retention).toEqual({ archiveMs: 7 * 86_400_000, deadMs: 30 * 86_400_000, intervalMs: 60_000, archivePartitionMs: 86_400_000 });
    expect(resolve({ retention: { archiveMs: 3_600_000 } }).retention.archivePartitionMs).toBe(900_000);
    expect(resolve({ retention: { archiveMs: 0 } }).retention.archivePartitionMs).toBe(60_000);
    expect(resolve({ retention: { archiveMs: 3_600_000, archivePartitionMs: 120_000 } }).retention.archivePartitionMs).toBe(120_000);
    // Ten years of history: partitions of about 10 days (whole minutes; at most 366 kept), not of one day.
    expect(resolve({ retention: { archiveMs: 3650 * 86_400_000 } }).retention.archivePartitionMs).toBe(861_660_000);
  });

  it('gives each resolution its own worker id', () => {
    expect(resolve({}).workerId).not.toBe(resolve({}).workerId);
  });

  it('keeps valid explicit values', () => {
    const o = resolve({
      databaseUrl: 'postgresql://u:p@localhost:5432/db',
      schema: 'jobs_2',
      workerId: 'w-1',
      autoStart: false,
      pollIntervalMs: 10,
      shutdownTimeoutMs: 0,
      installSchema: false,
      maxPayloadBytes: 1,
      maxErrorBytes: 64,
      finished: 'delete',
      rescueIntervalMs: 10,
      handlerDefaults: { maxAttempts: 9, backoff: { type: 'fixed', delayMs: 5 } },
      queues: { 'a.q': { concurrency: 2 } },
    });
    expect(o).toMatchObject({
      databaseUrl: 'postgresql://u:p@localhost:5432/db',
      schema: 'jobs_2',
      workerId: 'w-1',
      autoStart: false,
      pollIntervalMs: 10,
      shutdownTimeoutMs: 0,
      installSchema: false,
      maxPayloadBytes: 1,
      maxErrorBytes: 64,
      finished: 'delete',
      rescueIntervalMs: 10,
      queues: { 'a.q': { concurrency: 2 } },
    });
    // handlerDefaults layer over the library's; backoff merges field by field
    expect(o.handlerDefaults.maxAttempts).toBe(9);
    expect(o.handlerDefaults.concurrency).toBe(DEFAULT_HANDLER_OPTIONS.concurrency);
    expect(o.handlerDefaults.backoff).toEqual({ type: 'fixed', delayMs: 5, maxDelayMs: 3_600_000, jitter: true });
  });

  it.each(['pgqueue', 'jobs', '_private', 'a', 'q1_2_3', 'x'.repeat(48), 'select'])('accepts the schema name %j', (schema) => {
    expect(resolve({ schema }).schema).toBe(schema);
  });

  it.each([
    ['a quote and an injected statement', 'Robert"; DROP TABLE x;--'],
    ['the reserved public schema', 'public'],
    ['a pg_ prefix', 'pg_x'],
    ['pg_catalog', 'pg_catalog'],
    ['information_schema', 'information_schema'],
    ['the empty string', ''],
    ['upper case', 'UPPER'],
    ['mixed case', 'PgQueue'],
    ['49 characters (the NOTIFY channel <schema>_task_ready must fit in 63)', 'x'.repeat(49)],
    ['64 characters', 'x'.repeat(64)],
    ['a leading digit', '1jobs'],
    ['a dash', 'my-queue'],
    ['a dot', 'a.b'],
    ['a space', 'a b'],
    ['a trailing newline', 'jobs\n'],
    ['a non-ASCII letter', 'jöbs'],
    ['a number', 42],
    ['null', null],
    ['an object', { toString: () => 'pgqueue' }],
  ])('rejects a schema name with %s', (_label, schema) => {
    const err = thrown(() => resolve({ schema }));
    expect(err).toBeInstanceOf(InvalidOptionsError);
    expect((err as InvalidOptionsError).option).toBe('schema');
    expect(err.message).toContain('invalid option schema: ');
  });

  it.each([
    ['undefined', undefined],
    ['null', null],
    ['an empty object', {}],
    ['an object without $transaction', { $queryRawUnsafe: () => undefined }],
    ['an object without $queryRawUnsafe', { $transaction: () => undefined }],
    ['a string', 'prisma'],
    ['methods that are not functions', { $queryRawUnsafe: 1, $transaction: 1 }],
  ])('rejects prisma given as %s', (_label, prisma) => {
    const err = thrown(() => resolveModuleOptions({ prisma } as unknown as PgQueueModuleOptions));
    expect(err).toBeInstanceOf(InvalidOptionsError);
    expect(err.message).toContain('invalid option prisma: ');
  });

  it('refuses a partitionWeights key no partition can have (an unpaired surrogate, NUL, empty)', () => {
    for (const key of ['\ud800', 'a\u0000b', '']) {
      expect(thrown(() => resolve({ partitionWeights: { [key]: 2 } })).message).toContain('expected a partition key');
    }
    expect(resolve({ partitionWeights: { 'tenant-\u{1F600}': 2 } }).partitionWeights).toEqual({ 'tenant-\u{1F600}': 2 });
  });

  it('keeps readPrisma, the replica the operator reads that count or list go to', () => {
    const readPrisma = fakePrisma();
    const o = resolve({ readPrisma });
    expect(o.readPrisma).toBe(readPrisma);
    expect(o.prisma).not.toBe(readPrisma);
  });

  it.each([
    ['null', null],
    ['a connection string', 'postgresql://replica/app'],
    ['an object without $transaction', { $queryRawUnsafe: () => undefined }],
  ])('rejects readPrisma given as %s', (_label, readPrisma) => {
    const err = thrown(() => resolve({ readPrisma }));
    expect(err).toBeInstanceOf(InvalidOptionsError);
    expect(err.message).toContain('invalid option readPrisma: expected a PrismaClient instance');
  });

  it.each([undefined, null, 'options', 42])('rejects options given as %p', (options) => {
    const err = thrown(() => resolveModuleOptions(options as unknown as PgQueueModuleOptions));
    expect(err).toBeInstanceOf(InvalidOptionsError);
    expect(err.message).toContain('invalid option options: ');
  });

  it.each(['postgres://localhost/db', 'postgresql://u@h:1/d?sslmode=require'])('accepts the databaseUrl %j', (databaseUrl) => {
    expect(resolve({ databaseUrl }).databaseUrl).toBe(databaseUrl);
  });

  // Each row: the option, a bad value, the option's full path, the error class (every one an InvalidOptionsError).
  it.each([
    ['databaseUrl', 'mysql://localhost/db', 'databaseUrl', InvalidOptionsError],
    ['databaseUrl', 'localhost:5432', 'databaseUrl', InvalidOptionsError],
    ['databaseUrl', '', 'databaseUrl', InvalidOptionsError],
    ['databaseUrl', 42, 'databaseUrl', InvalidOptionsError],
    ['databaseUrl', ' postgres://localhost/db', 'databaseUrl', InvalidOptionsError],
    ['workerId', '', 'workerId', InvalidOptionsError],
    ['workerId', 'w'.repeat(201), 'workerId', InvalidOptionsError],
    ['workerId', 7, 'workerId', InvalidOptionsError],
    ['pollIntervalMs', 0, 'pollIntervalMs', InvalidOptionsError],
    ['pollIntervalMs', 9, 'pollIntervalMs', InvalidOptionsError],
    ['pollIntervalMs', -1, 'pollIntervalMs', InvalidOptionsError],
    ['pollIntervalMs', 100.5, 'pollIntervalMs', InvalidOptionsError],
    ['pollIntervalMs', NaN, 'pollIntervalMs', InvalidOptionsError],
    ['pollIntervalMs', Infinity, 'pollIntervalMs', InvalidOptionsError],
    ['pollIntervalMs', '2000', 'pollIntervalMs', InvalidOptionsError],
    ['shutdownTimeoutMs', -1, 'shutdownTimeoutMs', InvalidOptionsError],
    ['maxPayloadBytes', 0, 'maxPayloadBytes', InvalidOptionsError],
    ['maxPayloadBytes', 100 * 1024 * 1024 + 1, 'maxPayloadBytes', InvalidOptionsError],
    ['maxErrorBytes', 63, 'maxErrorBytes', InvalidOptionsError],
    ['maxErrorBytes', 1024 * 1024 + 1, 'maxErrorBytes', InvalidOptionsError],
    ['rescueIntervalMs', 0, 'rescueIntervalMs', InvalidOptionsError],
    ['finished', 'x', 'finished', InvalidOptionsError],
    ['finished', 'ARCHIVE', 'finished', InvalidOptionsError],
    ['finished', null, 'finished', InvalidOptionsError],
    ['schedules', {}, 'schedules', InvalidOptionsError],
    ['handlerDefaults', { concurrency: 0 }, 'handlerDefaults.concurrency', HandlerConfigurationError],
    ['handlerDefaults', { backoff: { type: 'x' } }, 'handlerDefaults.backoff.type', HandlerConfigurationError],
    ['queues', { 'a.q': { batchSize: 1.5 } }, 'queues["a.q"].batchSize', HandlerConfigurationError],
    ['retention', { archiveMs: -1 }, 'retention.archiveMs', InvalidOptionsError],
    ['retention', { archivePartitionMs: 59_999 }, 'retention.archivePartitionMs', InvalidOptionsError],
    ['retention', { archivePartitionMs: 367 * 86_400_000 }, 'retention.archivePartitionMs', InvalidOptionsError],
    // 1-minute partitions for 7 days of history: 10 080 partitions, each probed by every id lookup.
    ['retention', { archivePartitionMs: 60_000 }, 'retention.archivePartitionMs', InvalidOptionsError],
  ] as const)('rejects %s = %p, naming %s', (option, value, path, errorClass) => {
    const err = thrown(() => resolve({ [option]: value }));
    expect(err).toBeInstanceOf(errorClass);
    expect(err).toBeInstanceOf(InvalidOptionsError);
    expect((err as InvalidOptionsError).option).toBe(path);
    expect(err.message).toMatch(new RegExp(`^pg-queue: invalid option ${path.replace(/[.[\]"]/g, '\\$&')}: `));
  });

  it('names where a bad handler option came from by its full path', () => {
    expect(thrown(() => resolve({ handlerDefaults: { concurrency: 0 } })).message).toMatch(/^pg-queue: invalid option handlerDefaults\.concurrency: expected/);
    expect(thrown(() => resolve({ queues: { 'mail.send': { mode: 'x' } } })).message).toMatch(/^pg-queue: invalid option queues\["mail\.send"\]\.mode: expected/);
  });

  it('validates queue overrides against the merged handlerDefaults', () => {
    // delayMs 10 s over the default cap of 1 h is fine; a queue cap under the module's delay is not
    expect(() => resolve({ handlerDefaults: { backoff: { type: 'fixed', delayMs: 10_000 } } })).not.toThrow();
    const err = thrown(() =>
      resolve({ handlerDefaults: { backoff: { type: 'fixed', delayMs: 10_000 } }, queues: { 'a.q': { backoff: { maxDelayMs: 5000 } } } }),
    );
    expect(err).toBeInstanceOf(HandlerConfigurationError);
    expect((err as InvalidOptionsError).option).toBe('queues["a.q"].backoff.maxDelayMs');
  });
});

describe('resolveHandlerOptions', () => {
  const base = DEFAULT_HANDLER_OPTIONS;
  const res = (over: Record<string, unknown>) => resolveHandlerOptions('@TaskHandler("t.q")', base, over as Partial<HandlerOptions>, 'Test.run');

  it('returns the base when nothing is overridden, without mutating it', () => {
    const snapshot = structuredClone(base);
    expect(resolveHandlerOptions('x', base)).toEqual(base);
    expect(resolveHandlerOptions('x', base, {})).toEqual(base);
    res({ concurrency: 3, backoff: { type: 'linear' } });
    expect(base).toEqual(snapshot);
  });

  it('layers overrides, merging backoff field by field', () => {
    const o = res({ mode: 'lease', concurrency: 3, batchSize: 1, maxAttempts: 1, timeoutMs: 1, leaseMs: 100, retryBlocksGroup: false, backoff: { type: 'linear', jitter: false } });
    expect(o).toEqual({
      mode: 'lease',
      concurrency: 3,
      batchSize: 1,
      maxAttempts: 1,
      timeoutMs: 1,
      leaseMs: 100,
      retryBlocksGroup: false,
      backoff: { type: 'linear', delayMs: 1000, maxDelayMs: 3_600_000, jitter: false },
      globalConcurrency: null,
      partitionConcurrency: null,
      rateLimit: null,
      priorityAgingMs: null,
      limiter: null,
    });
  });

  it('accepts the bounds of every range', () => {
    expect(() => res({ concurrency: 1000, batchSize: 1000, maxAttempts: 1_000_000, timeoutMs: 1_000_000_000, leaseMs: 1_000_000_000 })).not.toThrow();
    expect(() => res({ backoff: { type: 'fixed', delayMs: 0, maxDelayMs: 0 } })).not.toThrow();
    expect(() => res({ backoff: { type: 'fixed', delayMs: 5000, maxDelayMs: 5000 } })).not.toThrow();
  });

  it.each([
    ['mode', { mode: 'x' }],
    ['mode', { mode: 'Transactional' }],
    ['mode', { mode: null }],
    ['concurrency', { concurrency: 0 }],
    ['concurrency', { concurrency: 1001 }],
    ['concurrency', { concurrency: 2.5 }],
    ['concurrency', { concurrency: '10' }],
    ['batchSize', { batchSize: 1.5 }],
    ['batchSize', { batchSize: 0 }],
    ['batchSize', { batchSize: NaN }],
    ['maxAttempts', { maxAttempts: 0 }],
    ['maxAttempts', { maxAttempts: 1_000_001 }],
    ['timeoutMs', { timeoutMs: 0 }],
    ['timeoutMs', { timeoutMs: Infinity }],
    ['leaseMs', { leaseMs: 99 }],
    ['retryBlocksGroup', { retryBlocksGroup: 'yes' }],
    ['retryBlocksGroup', { retryBlocksGroup: 1 }],
    ['backoff.type', { backoff: { type: 'x' } }],
    ['backoff.delayMs', { backoff: { delayMs: -1 } }],
    ['backoff.delayMs', { backoff: { delayMs: NaN } }],
    ['backoff.delayMs', { backoff: { delayMs: '1000' } }],
    ['backoff.maxDelayMs', { backoff: { delayMs: 5000, maxDelayMs: 4999 } }],
    ['backoff.maxDelayMs', { backoff: { delayMs: 1000, maxDelayMs: '9' } }],
    // the merged delay is checked against the merged cap: base delay 1000 over a cap of 10
    ['backoff.maxDelayMs', { backoff: { maxDelayMs: 10 } }],
  ])('rejects %s in %p with a HandlerConfigurationError naming it', (option, over) => {
    const err = thrown(() => res(over));
    expect(err).toBeInstanceOf(HandlerConfigurationError);
    expect(err.message).toContain(`invalid option @TaskHandler("t.q").${option} (Test.run): `);
  });

  // Values that pass the checks above by accident: a NaN cap compares false with everything, and an
  // infinite delay is ">= 0". Both make backoffDelayMs return NaN / Infinity for the retry delay.
  it.each([
    ['backoff.maxDelayMs', 'maxDelayMs NaN', { backoff: { type: 'fixed', delayMs: 1000, maxDelayMs: NaN } }],
    ['backoff.delayMs', 'delayMs Infinity without a cap', { backoff: { type: 'fixed', delayMs: Infinity, maxDelayMs: undefined } }],
  ])('rejects the non-finite %s (%s)', (option, _label, over) => {
    const err = thrown(() => res(over));
    expect(err).toBeInstanceOf(HandlerConfigurationError);
    expect(err.message).toContain(`invalid option @TaskHandler("t.q").${option} (Test.run): `);
  });

  it('treats an option given as undefined as not given: the default stays', () => {
    const o = resolveHandlerOptions('h', DEFAULT_HANDLER_OPTIONS, { concurrency: undefined, backoff: { type: undefined, maxDelayMs: undefined } as never });
    expect(o.concurrency).toBe(DEFAULT_HANDLER_OPTIONS.concurrency);
    expect(o.backoff).toEqual(DEFAULT_HANDLER_OPTIONS.backoff);
  });
});

describe('unknown options', () => {
  /** Each row: the options, the full path of the unknown key, the name the message suggests (null: none is close). */
  it.each([
    [{ autoStrat: false }, 'autoStrat', 'autoStart'],
    [{ pollIntervalMS: 500 }, 'pollIntervalMS', 'pollIntervalMs'],
    [{ retention: { archivMs: 1000 } }, 'retention.archivMs', 'archiveMs'],
    [{ handlerDefaults: { maxAtempts: 3 } }, 'handlerDefaults.maxAtempts', 'maxAttempts'],
    [{ handlerDefaults: { backoff: { type: 'fixed', delay: 5 } } }, 'handlerDefaults.backoff.delay', 'delayMs'],
    [{ queues: { q: { concurency: 2 } } }, 'queues["q"].concurency', 'concurrency'],
    [{ queues: { 'a.q': { rateLimit: { max: 1, perMs: 1000, perPartion: true } } } }, 'queues["a.q"].rateLimit.perPartion', 'perPartition'],
    [{ frobnicate: 1 }, 'frobnicate', null],
  ])('%j is an InvalidOptionsError naming %s', (options, path, suggestion) => {
    const err = thrown(() => resolve(options));
    expect(err).toBeInstanceOf(InvalidOptionsError);
    expect((err as InvalidOptionsError).option).toBe(path);
    const key = path.replace(/^.*[.\]]/, '');
    expect(err.message).toContain(`invalid option ${path}: unknown option "${key}"`);
    if (suggestion) expect(err.message).toContain(`— did you mean "${suggestion}"?`);
    else expect(err.message).toMatch(/expected one of: prisma, databaseUrl, /);
  });

  it('handler settings at any level are HandlerConfigurationErrors', () => {
    expect(thrown(() => resolve({ queues: { q: { concurency: 2 } } }))).toBeInstanceOf(HandlerConfigurationError);
  });

  it('says where an option of forRoot itself belongs when it comes back from the factory', () => {
    const err = thrown(() => resolve({ isGlobal: false }));
    expect((err as InvalidOptionsError).option).toBe('isGlobal');
    expect(err.message).toMatch(/next to useFactory/);
  });

  it('an unknown key is refused even when its value is undefined (a misspelling all the same)', () => {
    expect((thrown(() => resolve({ autoStrat: undefined })) as InvalidOptionsError).option).toBe('autoStrat');
  });

  it('a handler option in @TaskHandler, named by its full path and the method', () => {
    const err = thrown(() => resolveHandlerOptions('@TaskHandler("q")', DEFAULT_HANDLER_OPTIONS, { maxAtempts: 3 } as never, 'Orders.run'));
    expect(err).toBeInstanceOf(HandlerConfigurationError);
    expect(err.message).toBe('pg-queue: invalid option @TaskHandler("q").maxAtempts (Orders.run): unknown option "maxAtempts" — did you mean "maxAttempts"?');
  });

  it('handler settings and backoff given as something other than an object are refused, not ignored', () => {
    expect((thrown(() => resolve({ queues: { q: 5 } })) as InvalidOptionsError).option).toBe('queues["q"]');
    expect((thrown(() => resolve({ handlerDefaults: { backoff: 'fixed' } })) as InvalidOptionsError).option).toBe('handlerDefaults.backoff');
    expect((thrown(() => resolve({ retention: 5 })) as InvalidOptionsError).option).toBe('retention');
  });
});
