import { Injectable, Module } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  HandlerConfigurationError,
  InvalidEnqueueOptionsError,
  InvalidOptionsError,
  PgQueueModule,
  TaskHandler,
  TaskHandlerRegistry,
  TaskQueue,
} from '@app/pg-queue';
import type { PrismaClient } from '../../src/generated/prisma/client';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

@Injectable()
class First {
  @TaskHandler('dup.q')
  async a() {}
}

@Injectable()
class Second {
  @TaskHandler('dup.q')
  async b() {}
}

@Injectable()
class BadOptions {
  @TaskHandler('bad.q', { concurrency: 0 })
  async run() {}
}

@Injectable()
class Misspelled {
  @TaskHandler('typo.q', { maxAtempts: 3 } as never)
  async run() {}
}

@Injectable()
class MisspelledSchedule {
  @TaskHandler('typo.schedule', { schedule: { evryMs: 60_000 } } as never)
  async tick() {}
}

@Injectable()
class Orders {
  @TaskHandler('orders.confirm')
  async confirm() {}
}

@Module({ providers: [Orders] })
class OrdersModule {}

@Module({ providers: [Orders] })
class BillingModule {}

@Injectable()
class Aliased {
  @TaskHandler('aliased.q')
  async run() {}
}

describe('module configuration', () => {
  let db: TestDatabase;
  let prisma: PrismaClient;
  beforeAll(async () => {
    db = await createTestDatabase();
    prisma = db.prisma();
  });
  afterAll(() => db.drop());

  const init = async (providers: any[], options: Record<string, unknown> = {}) => {
    const moduleRef = await Test.createTestingModule({
      imports: [PgQueueModule.forRoot({ prisma, autoStart: false, ...options } as any)],
      providers,
    }).compile();
    return moduleRef.init();
  };

  it('two handlers for one queue is a startup error naming both', async () => {
    await expect(init([First, Second])).rejects.toThrow(HandlerConfigurationError);
    await expect(init([First, Second])).rejects.toThrow(/queue "dup.q" has two handlers: First.a and Second.b/);
  });

  it('one provider class registered in two modules is named as such, with the modules, not as two handlers', async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [PgQueueModule.forRoot({ prisma, autoStart: false }), OrdersModule, BillingModule],
    }).compile();
    const err = await moduleRef.init().then(() => null, (e: Error) => e);
    expect(err).toBeInstanceOf(HandlerConfigurationError);
    expect(err?.message).toMatch(/Orders is registered twice, in OrdersModule and in BillingModule/);
    expect(err?.message).not.toMatch(/two handlers/);
  });

  it('a provider and an alias of it (useExisting) are one instance: one handler, no error', async () => {
    const app = await init([Aliased, { provide: 'aliased', useExisting: Aliased }]);
    try {
      expect(app.get(TaskHandlerRegistry).all().map((h) => h.name)).toEqual(['Aliased.run']);
    } finally {
      await app.close();
    }
  });

  it.each([
    [Misspelled, /^pg-queue: invalid option @TaskHandler\("typo\.q"\)\.maxAtempts \(Misspelled\.run\): unknown option "maxAtempts" — did you mean "maxAttempts"\?$/],
    [MisspelledSchedule, /^pg-queue: invalid option @TaskHandler\("typo\.schedule"\)\.schedule\.evryMs \(MisspelledSchedule\.tick\): unknown option "evryMs" — did you mean "everyMs"\?$/],
  ])('a misspelled @TaskHandler option (%p) fails startup naming it and the nearest valid one', async (provider, message) => {
    const err = await init([provider]).then(() => null, (e: Error) => e);
    expect(err).toBeInstanceOf(InvalidOptionsError);
    expect(err?.message).toMatch(message);
  });

  it('a misspelled option in a forRootAsync factory fails startup with an InvalidOptionsError naming its full path', async () => {
    for (const [options, path, suggestion] of [
      [{ autoStrat: false }, 'autoStrat', 'autoStart'],
      [{ queues: { q: { concurency: 2 } } }, 'queues["q"].concurency', 'concurrency'],
    ] as const) {
      // The options resolve while the module compiles: the error comes from compile(), as from init() in an app.
      const err = await Test.createTestingModule({
        imports: [PgQueueModule.forRootAsync({ useFactory: async () => ({ prisma, autoStart: false, ...options }) as never })],
      })
        .compile()
        .then((moduleRef) => moduleRef.init())
        .then(async (app) => (await app.close(), null), (e: Error) => e);
      expect(err).toBeInstanceOf(InvalidOptionsError);
      expect((err as InvalidOptionsError).option).toBe(path);
      expect(err?.message).toContain(`: unknown option "${path.replace(/^.*\./, '')}" — did you mean "${suggestion}"?`);
    }
  });

  it('bad handler options fail at startup naming the handler and the option', async () => {
    await expect(init([BadOptions])).rejects.toThrow(/^pg-queue: invalid option @TaskHandler\("bad\.q"\)\.concurrency \(BadOptions\.run\): /);
  });

  it.each([
    [{ pollIntervalMs: -1 }, 'pollIntervalMs'],
    [{ schema: 'Bad-Name' }, 'schema'],
    [{ databaseUrl: 'mysql://x' }, 'databaseUrl'],
    [{ prisma: {} }, 'prisma'],
    [{ queues: { 'x.q': { maxAttempts: 0 } } }, 'queues["x.q"].maxAttempts'],
    [{ handlerDefaults: { backoff: { type: 'never' } } }, 'handlerDefaults.backoff.type'],
    [{ schedules: [{ queue: 'x.q', everyMs: 5 }] }, 'schedules[0].everyMs'],
    [{ schedules: [{ queue: 'x.q', everyMs: 5000, missd: 'once' }] }, 'schedules[0].missd'],
    [{ retention: { archiveMS: 1000 } }, 'retention.archiveMS'],
  ])('invalid module options %j fail at startup with an InvalidOptionsError naming %s', async (options, path) => {
    const err = await init([], options).then(() => null, (e: Error) => e);
    expect(err).toBeInstanceOf(InvalidOptionsError);
    expect((err as InvalidOptionsError).option).toBe(path);
    expect(err?.message).toContain(`invalid option ${path}: `);
  });

  it('forRootAsync resolves options from a factory; an API-only app enqueues for queues it does not handle', async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [PgQueueModule.forRootAsync({ useFactory: async () => ({ prisma, autoStart: false, schema: 'api_only', handlerDefaults: { maxAttempts: 9 } }) })],
    }).compile();
    const app = await moduleRef.init();
    try {
      expect(app.get(TaskHandlerRegistry).all()).toEqual([]);
      const id = await app.get(TaskQueue).enqueue('elsewhere.q', { hello: 'world' });
      // Its own handlerDefaults do not stamp the row: the handler that runs the task decides.
      expect(await app.get(TaskQueue).get(id)).toMatchObject({ queue: 'elsewhere.q', state: 'pending', maxAttempts: null });
      // A misspelled enqueue option is refused, not ignored: nothing is written.
      await expect(app.get(TaskQueue).enqueue('elsewhere.q', {}, { dealy: 1000 } as never)).rejects.toThrow(
        new InvalidEnqueueOptionsError('dealy', 'unknown option "dealy" — did you mean "delayMs"?'),
      );
      await expect(app.get(TaskQueue).enqueueMany([{ queue: 'elsewhere.q', payload: {} }], { tz: {} } as never)).rejects.toThrow(/invalid enqueue option "tz": .*did you mean "tx"/);
      await expect(app.get(TaskQueue).enqueueMany([{ queue: 'elsewhere.q', payload: {}, option: { delayMs: 5 } } as never])).rejects.toThrow(
        /invalid enqueue option "items\[0\]\.option": .*did you mean "options"/,
      );
      expect((await app.get(TaskQueue).list({ queue: 'elsewhere.q' })).length).toBe(1);
    } finally {
      await app.close();
    }
  });
});
