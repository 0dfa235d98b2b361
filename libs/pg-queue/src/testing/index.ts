import type { INestApplicationContext } from '@nestjs/common';
import { WorkerOrchestrator } from '../worker/worker.orchestrator';

/**
 * Runs every due task of `queue` (or of every queue handled in this app) inline, including the
 * follow-ups they enqueue, until none is left; returns how many attempts ran. Tests await it
 * instead of sleeping. Tasks delayed into the future are left alone.
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
export function drainQueue(app: INestApplicationContext, queue?: string): Promise<number> {
  return app.get(WorkerOrchestrator, { strict: false }).drain(queue);
}

/** Returns tasks whose lease expired to the queue now, instead of waiting for the rescuer. */
export function rescueExpiredLeases(app: INestApplicationContext): Promise<{ rescued: number; dead: number }> {
  return app.get(WorkerOrchestrator, { strict: false }).rescueExpired();
}

/** Enqueues the due ticks of every schedule now, as the ticker would on time. */
export function tickSchedules(app: INestApplicationContext): Promise<number> {
  return app.get(WorkerOrchestrator, { strict: false }).tickSchedules();
}

/** Deletes expired history now (archived tasks past retention.archiveMs, dead past retention.deadMs). */
export function pruneHistory(app: INestApplicationContext): Promise<{ archived: number; dead: number }> {
  return app.get(WorkerOrchestrator, { strict: false }).pruneHistory();
}
