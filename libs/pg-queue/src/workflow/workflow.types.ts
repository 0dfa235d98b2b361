/** One journaled call of a workflow, as `get(id)` shows it (results are not loaded). */
export interface WorkflowStepInfo {
  /** Call position, from 0. */
  seq: number;
  kind: 'step' | 'transaction' | 'sleep' | 'signal' | 'enqueue' | 'child' | 'patch';
  name: string;
  /** 'waiting': a signal wait or a child not resolved yet. */
  outcome: 'ok' | 'error' | 'waiting';
  /** True for a signal wait that ended by its `timeoutMs`, with no signal (its outcome is 'ok', its value null). */
  timedOut?: boolean;
  /** The attempt that recorded it. */
  attempt: number;
  startedAt: Date | null;
  finishedAt: Date;
}

/** What a parked workflow waits for. */
export interface WorkflowWait {
  kind: 'sleep' | 'signal' | 'child';
  /** The signal's name, or the child task's id. */
  name: string | null;
  /** When it wakes anyway (a sleep's end, a signal wait's timeout); null: no time bound. */
  until: Date | null;
}

/** A workflow's journal and wait, on `TaskInfo.workflow` (tasks that are not workflows have none). */
export interface WorkflowInfo {
  steps: WorkflowStepInfo[];
  /** While parked (state 'waiting'), else null. */
  waitingFor: WorkflowWait | null;
}
