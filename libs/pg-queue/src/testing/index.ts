import type { INestApplicationContext } from '@nestjs/common';
import { DEFAULT_CONNECTION, registrationToken } from '../pg-queue.connections';
import type { WorkerOrchestrator } from '../worker/worker.orchestrator';

/** The orchestrator of the PgQueueModule registration named `connection`. */
function orchestrator(app: INestApplicationContext, connection: string): WorkerOrchestrator {
  return app.get(registrationToken(connection, 'orchestrator'), { strict: false });
}

/**
 * Runs every due task of `queue` (or of every queue handled in this app) inline, including the
 * follow-ups they enqueue, until none is left; returns how many attempts ran. Tests await it
 * instead of sleeping. Tasks delayed into the future are left alone. Like every helper here it
 * acts on the default PgQueueModule registration, or on the one named `connection`.
 *
 * @example
 * ```ts
 * const app = await Test.createTestingModule({ imports: [AppModule] }).compile();
 * await app.init();
 * await orders.create({ ... });
 * await drainQueue(app);
 * expect(await prisma.order.findFirst()).toMatchObject({ status: 'emailed' });
 * ```
 */
export function drainQueue(app: INestApplicationContext, queue?: string, connection = DEFAULT_CONNECTION): Promise<number> {
  return orchestrator(app, connection).drain(queue);
}

/** Returns tasks whose lease expired to the queue now, instead of waiting for the rescuer. */
export function rescueExpiredLeases(app: INestApplicationContext, connection = DEFAULT_CONNECTION): Promise<{ rescued: number; dead: number }> {
  return orchestrator(app, connection).rescueExpired();
}

/** Enqueues the due ticks of every schedule now, as the ticker would on time. */
export function tickSchedules(app: INestApplicationContext, connection = DEFAULT_CONNECTION): Promise<number> {
  return orchestrator(app, connection).tickSchedules();
}

/**
 * Runs a retention round now: drops archive partitions past retention.archiveMs (creating the
 * coming ones), deletes dead and cancelled tasks past retention.deadMs.
 */
export function pruneHistory(app: INestApplicationContext, connection = DEFAULT_CONNECTION): Promise<{ archived: number; dead: number; partitionsDropped: number }> {
  return orchestrator(app, connection).pruneHistory();
}
