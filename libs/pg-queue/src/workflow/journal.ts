import { isTextKey } from '../core/task-rules';
import { WorkflowDefinitionError, WorkflowReplayError } from './workflow.errors';

export type CallKind = 'step' | 'transaction' | 'sleep' | 'signal' | 'enqueue' | 'child' | 'patch';

/** One journal row (workflow_step), as loaded when an attempt starts. */
export interface JournalEntry {
  seq: number;
  kind: CallKind;
  name: string;
  /** 'waiting': a signal wait or a child not resolved yet (its result holds the deadline or child id). */
  outcome: 'ok' | 'error' | 'waiting';
  result: any;
}

/** Kinds whose names must be unique within a workflow: their entries are looked up as "this step". */
const UNIQUE_NAMES: ReadonlySet<CallKind> = new Set(['step', 'transaction', 'child']);

/**
 * The replay cursor of one attempt: hands out call positions in call order, synchronously (so that
 * `Promise.all` of several calls is numbered the same way on every run), and checks each call
 * against what the journal recorded at its position. No I/O.
 */
export class ReplayCursor {
  private readonly entries = new Map<number, JournalEntry>();
  private readonly end: number;
  private next = 0;
  private readonly names = new Set<string>();
  private readonly patches = new Map<string, boolean>();

  constructor(
    private readonly taskId: string,
    entries: readonly JournalEntry[],
  ) {
    for (const e of entries) this.entries.set(e.seq, e);
    this.end = entries.reduce((max, e) => Math.max(max, e.seq + 1), 0);
  }

  /**
   * The position of a call of `kind` named `name`, and what the journal holds there (null: the
   * call runs for the first time). Throws WorkflowReplayError when the journal holds another call.
   */
  call(kind: CallKind, name: string): { seq: number; entry: JournalEntry | null } {
    if (!isTextKey(name)) {
      // Journaled as text: U+0000 or a lone surrogate would fail the write, after the call ran.
      const given: unknown = name; // the guard leaves `never` here; JavaScript callers pass anything
      const shown = typeof given === 'string' ? JSON.stringify(given.slice(0, 100)) : typeof given;
      throw new WorkflowDefinitionError(`pg-queue: workflow ${this.taskId} called a ${kind} named ${shown}: a call's name is a non-empty string of at most 512 characters, without U+0000 or unpaired surrogates`);
    }
    if (UNIQUE_NAMES.has(kind)) {
      if (this.names.has(name)) {
        throw new WorkflowDefinitionError(`pg-queue: workflow ${this.taskId} called a ${kind} named "${name}" twice: step names must be unique within a workflow (in a loop, add the index: \`${name}-\${i}\`)`);
      }
      this.names.add(name);
    }
    const seq = this.next++;
    const entry = this.entries.get(seq) ?? null;
    if (entry && (entry.kind !== kind || entry.name !== name)) {
      throw new WorkflowReplayError(this.taskId, seq + 1, describe(entry.kind, entry.name), `called ${describe(kind, name)}`);
    }
    return { seq, entry };
  }

  /**
   * `wf.patched(id)`: true when the journal has this patch's marker at the current position (it is
   * consumed) or the journal ends here (`mark`: the position at which to write the marker); false
   * when the journal holds another call here (a run that started before the patch: the position is
   * left for that call). The answer is kept for the rest of the run.
   */
  patched(id: string): { value: boolean; mark: number | null } {
    const known = this.patches.get(id);
    if (known !== undefined) return { value: known, mark: null };
    const entry = this.entries.get(this.next);
    let result: { value: boolean; mark: number | null };
    if (entry === undefined && this.next >= this.end) result = { value: true, mark: this.next++ };
    else if (entry?.kind === 'patch' && entry.name === id) {
      this.next++;
      result = { value: true, mark: null };
    } else result = { value: false, mark: null };
    this.patches.set(id, result.value);
    return result;
  }

  /** A new entry written at `seq` this run (so that a later look at the same position sees it). */
  recorded(entry: JournalEntry): void {
    this.entries.set(entry.seq, entry);
  }

  /** Throws when the handler returned with journal entries beyond its last call (code removed a call). */
  assertConsumed(): void {
    if (this.next >= this.end) return;
    const left = this.entries.get(this.next);
    throw new WorkflowReplayError(this.taskId, this.next + 1, left ? describe(left.kind, left.name) : 'an entry', 'returned (no call)');
  }
}

function describe(kind: CallKind, name: string): string {
  return kind === 'sleep' ? 'a sleep' : kind === 'patch' ? `patch "${name}"` : `${kind} "${name}"`;
}
