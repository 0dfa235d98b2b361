import { InvalidArgumentError } from '../errors';
import { serialisePayload } from '../core/task-input';
import type { OperatorRepository, TaskChangeResult } from '../sql/operator.repository';
import type { PrismaClientLike } from '../types';
import { shown } from './arguments';

export type { TaskChangeResult } from '../sql/operator.repository';

/** When `reschedule` moves a task to: a Date, or ms from now (by the database's clock). */
export type RescheduleTo = { runAt: Date } | { delayMs: number };

const MAX_DELAY_MS = 100 * 365 * 86_400_000;

/**
 * The changes to a task that has not run yet (TaskQueue.promote / reschedule / updatePayload):
 * arguments checked here, fenced in SQL (see changePending in operate.sql.ts).
 */
export class TaskChanges {
  constructor(
    private readonly prisma: PrismaClientLike,
    private readonly operator: OperatorRepository,
    private readonly maxPayloadBytes: number,
  ) {}

  promote(id: string): Promise<TaskChangeResult> {
    return this.operator.change(this.prisma, 'promote', id);
  }

  reschedule(id: string, to: RescheduleTo): Promise<TaskChangeResult> {
    const { runAt, delayMs } = (to ?? {}) as { runAt?: unknown; delayMs?: unknown };
    if ((runAt === undefined) === (delayMs === undefined) || Object.keys(to).length !== 1) {
      throw new InvalidArgumentError('to', `expected { runAt: Date } or { delayMs: number }, got ${shown(to)}`);
    }
    if (runAt !== undefined) {
      const year = runAt instanceof Date ? runAt.getUTCFullYear() : NaN;
      if (!(year >= 1 && year <= 9999)) throw new InvalidArgumentError('runAt', 'expected a valid Date between the years 1 and 9999');
      return this.operator.change(this.prisma, 'reschedule', id, (runAt as Date).toISOString(), null);
    }
    if (typeof delayMs !== 'number' || !Number.isInteger(delayMs) || delayMs < 0 || delayMs > MAX_DELAY_MS) {
      throw new InvalidArgumentError('delayMs', `expected an integer of ms from 0 to ${MAX_DELAY_MS} (100 years), got ${shown(delayMs)}`);
    }
    return this.operator.change(this.prisma, 'reschedule', id, null, delayMs);
  }

  updatePayload(id: string, payload: unknown): Promise<TaskChangeResult> {
    const json = serialisePayload(`task ${id}`, payload, this.maxPayloadBytes);
    return this.operator.change(this.prisma, 'updatePayload', id, json);
  }
}
