import type { BackoffOptions, FollowUpOptions, PayloadOf } from '../types';

/** Options of `wf.step`: the step's own retries, before its error reaches the workflow. */
export interface StepOptions {
  /** Runs of the step's function before its error is final (default 1). */
  maxAttempts?: number;
  /** Between runs (default exponential from 500 ms, at most 30 s). */
  backoff?: BackoffOptions;
  /** Gives up on one run after this long (a StepTimeoutError; the function is not stopped). */
  timeoutMs?: number;
}

/** Options of `wf.transaction`. */
export interface TransactionStepOptions {
  /** Prisma's interactive-transaction timeout for this step (default 30 000 ms). */
  timeoutMs?: number;
}

/**
 * What a `@Workflow` method receives besides its input. Each call is journaled (steps,
 * transactions and children by name; sleeps, signal waits and enqueues by their order among calls
 * of the same kind and name): after a crash, a lost lease, a deploy or a wake-up the method runs
 * again from the top and every call that finished returns its journaled outcome instead of running
 * again. Anything that varies
 * from run to run (the clock, randomness, I/O) belongs inside a step.
 */
export interface WorkflowContext<TTx = any> {
  /** The workflow's task id. */
  readonly workflowId: string;
  /** Fires when the attempt is given up (cancel, lost lease, timeout, shutdown). */
  readonly signal: AbortSignal;
  /** Runs `fn` until it returns once (at least once: a crash before its record runs it again); then replays its result. */
  step<T>(name: string, fn: () => T | Promise<T>, options?: StepOptions): Promise<T>;
  /** Runs `fn` in a Prisma transaction that also records the step: its writes commit exactly once. */
  transaction<T>(name: string, fn: (tx: TTx) => Promise<T>, options?: TransactionStepOptions): Promise<T>;
  /** Parks the workflow for `ms` (no worker, lease or connection held meanwhile). */
  sleep(ms: number): Promise<void>;
  sleepUntil(at: Date): Promise<void>;
  /** The next signal of this name sent to the workflow (each once, in order), or null after `timeoutMs`. */
  waitForSignal<T = unknown>(name: string, options?: { timeoutMs?: number }): Promise<T | null>;
  /** Enqueues a task once; returns its id. */
  enqueue<Q extends string>(queue: Q, payload: PayloadOf<Q>, options?: FollowUpOptions): Promise<string>;
  /** Starts a task or workflow once and returns its result when it is done; ChildWorkflowError if it ends dead or cancelled. */
  child<R = unknown, Q extends string = string>(name: string, queue: Q, input: PayloadOf<Q>, options?: FollowUpOptions): Promise<R>;
  /** True for runs that reach this point with the new code, false for runs that passed it with the old. */
  patched(id: string): Promise<boolean>;
  /** A key stable across attempts, unique per workflow and step: the idempotency key for an outside call. */
  stepKey(name: string): string;
}
