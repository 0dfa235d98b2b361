import type { INestApplicationContext, ModuleMetadata, Provider } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { PgQueueModule, TaskQueue, type PgQueueModuleOptions, type TaskEvent } from '@app/pg-queue';
import type { PrismaClient } from '../../src/generated/prisma/client';
import { firstValueFrom, filter, take, toArray, type Observable } from 'rxjs';
import { ownerOf, track } from './leftovers';

export interface QueueApp {
  app: INestApplicationContext;
  queue: TaskQueue;
  close(): Promise<void>;
}

/** Boots a Nest app with PgQueueModule and the given handler providers; closed with its test database at the latest. */
export async function bootQueueApp(
  prisma: PrismaClient,
  providers: Provider[],
  options: Partial<PgQueueModuleOptions> = {},
  imports: ModuleMetadata['imports'] = [],
): Promise<QueueApp> {
  const moduleRef = await Test.createTestingModule({
    imports: [PgQueueModule.forRoot({ prisma, pollIntervalMs: 200, shutdownTimeoutMs: 5000, ...options }), ...imports],
    providers,
  }).compile();
  const close = track(ownerOf.get(prisma) ?? '', () => moduleRef.close());
  const app = await moduleRef.init().catch(async (err: unknown) => {
    await close().catch(() => undefined); // a failed init may have started part of the machinery
    throw err;
  });
  return { app, queue: app.get(TaskQueue), close };
}

/** Resolves with the first `count` events matching `predicate`; subscribe before acting. */
export function nextEvents(events$: Observable<TaskEvent>, predicate: (e: TaskEvent) => boolean, count = 1): Promise<TaskEvent[]> {
  return firstValueFrom(events$.pipe(filter(predicate), take(count), toArray()));
}

/** A promise that can be resolved from outside (to hold a handler at a known point). */
export function deferred<T = void>() {
  let resolve!: (value: T) => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}
