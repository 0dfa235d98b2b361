import { InvalidArgumentError } from '../errors';
import { serialisePayload } from '../core/task-input';
import { isTextKey } from '../core/task-rules';
import type { TaskDetailRow } from '../sql/operator.repository';
import type { WorkflowRepository } from '../sql/workflow.repository';
import { WORKFLOW_TX_BOUNDS } from '../sql/workflow.repository';
import type { PrismaClientLike, SqlExecutor } from '../types';
import { SignalTargetError } from '../workflow/workflow.errors';
import type { WorkflowInfo, WorkflowStepInfo, WorkflowWait } from '../workflow/workflow.types';

/**
 * Sends a signal to workflow `id` (see TaskQueue.signal): inside `tx` when given (it commits with
 * the caller's writes), else in a transaction of its own. Returns the signal's id.
 */
export async function sendSignal(prisma: PrismaClientLike, repo: WorkflowRepository, tx: SqlExecutor | null, id: string, name: unknown, payload: unknown, maxBytes: number): Promise<string> {
  if (!isTextKey(name)) {
    // The rule of waitForSignal's names (and every call name): the same signal can be sent and waited for.
    const shown = typeof name === 'string' ? JSON.stringify(name.slice(0, 100)) : typeof name;
    throw new InvalidArgumentError('name', `expected a signal name (a non-empty string of at most 512 characters, without U+0000 or unpaired surrogates), got ${shown}`);
  }
  const json = serialisePayload(`signal ${name}`, payload === undefined ? null : payload, maxBytes);
  const sent = tx !== null ? await repo.send(tx, id, name, json) : await prisma.$transaction((t) => repo.send(t, id, name, json), WORKFLOW_TX_BOUNDS);
  if ('id' in sent) return sent.id;
  throw new SignalTargetError(id, sent.state === null ? 'unknown' : 'finished');
}

/** A task's workflow journal and wait, from its row (see get in inspect.sql.ts), or undefined when it has none (not a workflow, or not started). */
export function workflowOf(row: TaskDetailRow): WorkflowInfo | undefined {
  if (row.journal === null && row.waiting_for === null) return undefined;
  const steps: WorkflowStepInfo[] = (row.journal ?? []).map((s) => ({
    seq: s.seq,
    kind: s.kind as WorkflowStepInfo['kind'],
    name: s.name,
    outcome: s.outcome as WorkflowStepInfo['outcome'],
    timedOut: s.timedOut === true,
    attempt: s.attempt,
    startedAt: s.startedAt === null ? null : new Date(s.startedAt),
    finishedAt: new Date(s.finishedAt),
  }));
  return { steps, waitingFor: row.waiting_for === null ? null : waitOf(row.waiting_for, row.wake_at) };
}

function waitOf(waitingFor: string, wakeAt: Date | null): WorkflowWait {
  const colon = waitingFor.indexOf(':');
  const kind = (colon < 0 ? waitingFor : waitingFor.slice(0, colon)) as WorkflowWait['kind'];
  return { kind, name: colon < 0 ? null : waitingFor.slice(colon + 1), until: wakeAt };
}
