import type { Provider } from '@nestjs/common';
import { bootQueueApp, type QueueApp } from './queue-app';
import { createTestDatabase, type TestDatabase } from './test-database';

/** Long enough that a task started within a test was woken by NOTIFY, never by a poll. */
export const NO_POLL_MS = 120_000;

/**
 * Registers beforeAll/afterAll for two instances on one test database, both listening: `worker`
 * runs the handlers of `providers`, `api` has none (an HTTP side that enqueues and waits).
 * `beforeClose` runs first in afterAll (to release handlers a test holds).
 */
export function workerAndApi(providers: Provider[], poolSize: number, beforeClose: () => void = () => undefined) {
  const ctx = {} as { db: TestDatabase; worker: QueueApp; api: QueueApp };
  beforeAll(async () => {
    ctx.db = await createTestDatabase();
    const opts = { databaseUrl: ctx.db.url, pollIntervalMs: NO_POLL_MS, listenPollIntervalMs: NO_POLL_MS };
    ctx.worker = await bootQueueApp(ctx.db.prisma(poolSize), providers, opts);
    ctx.api = await bootQueueApp(ctx.db.prisma(poolSize), [], opts);
  });
  afterAll(async () => {
    beforeClose();
    await ctx.api?.close();
    await ctx.worker?.close();
    await ctx.db?.drop();
  });
  return ctx;
}
