import { Injectable } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  HandlerConfigurationError,
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
    } finally {
      await app.close();
    }
  });
});
