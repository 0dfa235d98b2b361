import { InvalidResultError } from '../errors';
import { serialisePayload, type RowLimits } from '../core/task-input';
import type { Attempt } from './attempt';

/**
 * Keeps what a handler returned as the attempt's result (JSON text, stored with its completion),
 * under the rules and size limit of payloads. Returns the error that fails the attempt when the
 * value cannot be stored, else null.
 */
export function keepResult(a: Attempt, value: unknown, limits: RowLimits): InvalidResultError | null {
  if (value === undefined) return null;
  try {
    a.result = serialisePayload(a.task.queue, value, limits.maxPayloadBytes);
    return null;
  } catch (err) {
    return new InvalidResultError(a.task.id, a.task.queue, (err as Error).message.replace(/^pg-queue: /, ''));
  }
}
