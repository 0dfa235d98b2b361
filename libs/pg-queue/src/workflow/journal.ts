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
  /** False: tentative, forgotten if an attempt fails before the workflow parks (see WorkflowRun.failing). Absent: kept. */
  kept?: boolean;
  /** True: `result` is not loaded yet (a large one past the load's budget), read when the call replays. */
  deferred?: boolean;
}

/** Kinds whose calls are matched by name (unique within a workflow); the others by their order among calls of the same kind and name. */
const NAMED: ReadonlySet<CallKind> = new Set(['step', 'transaction', 'child', 'patch']);

/**
 * The replay cursor of one attempt: matches each call with the journal entry it replays, and gives
 * a new call its position (its seq, the journal's key). No I/O.
 *
 * - A named call (`step`, `transaction`, `child`, and `patched`'s marker) is matched by its name,
 *   whatever the order of the calls: concurrent branches (`Promise.all`) end in a different order
 *   on each run, and their calls come in that order, so a position says nothing about them. A
 *   journal entry of that name but of another kind is a mismatch.
 * - A call without a name of its own (`sleep`, `waitForSignal`, `enqueue`) is matched by its order
 *   among the calls of the same kind and name (the n-th sleep, the n-th wait for "paid", the n-th
 *   enqueue to "email.send"), the way they were made: two such calls in concurrent branches can
 *   swap entries on a replay.
 * - A new call takes the next free position after the journal's last, in call order.
 */
export class ReplayCursor {
  private readonly entries = new Map<number, JournalEntry>();
  /** Entries of named calls, by name (patch markers apart: `patch\0<id>`). */
  private readonly named = new Map<string, JournalEntry>();
  /** Entries of the other calls, by kind and name, in journal order; and how many calls took one. */
  private readonly ordered = new Map<string, JournalEntry[]>();
  private readonly taken = new Map<string, number>();
  private readonly consumed = new Set<number>();
  private next: number;
  private readonly names = new Set<string>();
  private readonly patches = new Map<string, boolean>();

  constructor(
    private readonly taskId: string,
    entries: readonly JournalEntry[],
  ) {
    for (const e of [...entries].sort((x, y) => x.seq - y.seq)) {
      this.entries.set(e.seq, e);
      if (NAMED.has(e.kind)) this.named.set(namedKey(e.kind, e.name), e);
      else this.ordered.set(orderedKey(e.kind, e.name), [...(this.ordered.get(orderedKey(e.kind, e.name)) ?? []), e]);
    }
    this.next = entries.reduce((max, e) => Math.max(max, e.seq + 1), 0);
  }

  /**
   * The position of a call of `kind` named `name`, and the entry it replays (null: the call runs
   * for the first time). Throws WorkflowReplayError when the journal holds another kind of call
   * under that name, WorkflowDefinitionError for a name used twice or one that cannot be stored.
   */
  call(kind: CallKind, name: string): { seq: number; entry: JournalEntry | null } {
    this.checkName(kind, name);
    let entry: JournalEntry | null;
    if (NAMED.has(kind)) {
      if (this.names.has(name)) {
        throw new WorkflowDefinitionError(`pg-queue: workflow ${this.taskId} called a ${kind} named "${name}" twice: step names must be unique within a workflow (in a loop, add the index: \`${name}-\${i}\`)`);
      }
      this.names.add(name);
      entry = this.named.get(name) ?? null;
      if (entry && entry.kind !== kind) {
        throw new WorkflowReplayError(this.taskId, entry.seq + 1, describe(entry.kind, entry.name), `called ${describe(kind, name)}`);
      }
    } else {
      const key = orderedKey(kind, name);
      const n = this.taken.get(key) ?? 0;
      this.taken.set(key, n + 1);
      entry = this.ordered.get(key)?.[n] ?? null;
    }
    if (entry === null) return { seq: this.next++, entry: null };
    this.consumed.add(entry.seq);
    return { seq: entry.seq, entry };
  }

  /**
   * `wf.patched(id)`: true when the journal has this patch's marker (it is consumed), or when every
   * entry of the journal has been replayed (`mark`: the position at which to write the marker): a
   * run that reaches this point with the new code. False when entries are left to replay: a run
   * that passed this point with the old code. The answer is kept for the rest of the run.
   */
  patched(id: string): { value: boolean; mark: number | null } {
    this.checkName('patch', id);
    const known = this.patches.get(id);
    if (known !== undefined) return { value: known, mark: null };
    const marker = this.named.get(namedKey('patch', id));
    let result: { value: boolean; mark: number | null };
    if (marker) {
      this.consumed.add(marker.seq);
      result = { value: true, mark: null };
    } else if (this.leftOver() === null) result = { value: true, mark: this.next++ };
    else result = { value: false, mark: null };
    this.patches.set(id, result.value);
    return result;
  }

  /** A new entry written at `seq` this run (so that a later look at the same position sees it). */
  recorded(entry: JournalEntry): void {
    this.entries.set(entry.seq, entry);
    this.consumed.add(entry.seq);
  }

  /**
   * Throws when the handler returned with journal entries no call replayed (code removed a call).
   * Not at a park: a replayed park ends the run at once, before concurrent branches replayed theirs.
   * A patch marker no call asked for is not one: removing a `patched` check once no run needs the
   * old branch is how a patch ends.
   */
  assertConsumed(): void {
    const left = this.leftOver();
    if (left) throw new WorkflowReplayError(this.taskId, left.seq + 1, describe(left.kind, left.name), 'returned without making that call');
  }

  private leftOver(): JournalEntry | null {
    for (const e of this.entries.values()) if (!this.consumed.has(e.seq) && e.kind !== 'patch') return e;
    return null;
  }

  private checkName(kind: CallKind, name: string): void {
    if (isTextKey(name)) return;
    // Journaled as text: U+0000 or a lone surrogate would fail the write, after the call ran.
    const given: unknown = name; // the guard leaves `never` here; JavaScript callers pass anything
    const shown = typeof given === 'string' ? JSON.stringify(given.slice(0, 100)) : typeof given;
    throw new WorkflowDefinitionError(`pg-queue: workflow ${this.taskId} called a ${kind} named ${shown}: a call's name is a non-empty string of at most 512 characters, without U+0000 or unpaired surrogates`);
  }
}

function namedKey(kind: CallKind, name: string): string {
  return kind === 'patch' ? `patch\0${name}` : name;
}

function orderedKey(kind: CallKind, name: string): string {
  return `${kind}\0${name}`;
}

function describe(kind: CallKind, name: string): string {
  return kind === 'sleep' ? 'a sleep' : kind === 'patch' ? `patch "${name}"` : `${kind} "${name}"`;
}
