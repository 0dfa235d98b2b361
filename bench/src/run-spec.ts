/** What bench/run.js asks of one child process (child-main.ts), and what it gets back. */
export interface RunSpec {
  scenario: 'enqueue' | 'bulk' | 'drain' | 'latency' | 'idle' | 'history' | 'limit' | 'scale' | 'flow' | 'processes' | 'workflows' | 'process-worker' | 'make-history' | 'make-scale';
  lib: 'pg-queue' | 'pg-boss' | 'graphile-worker' | 'bullmq' | 'bare-pg' | 'dbos';
  mode?: 'transactional' | 'lease';
  /** BullMQ's row: its production settings or its defaults (see targets/bullmq.ts). */
  preset?: 'production' | 'defaults';
  concurrency: number;
  url: string;
  adminUrl: string;
  dbName: string;
  /** enqueue/bulk/drain/latency/history/limit: tasks; make-history: history rows; make-scale:
   * archived and delayed rows (each); scale: timed calls per operation. */
  n: number;
  bulkSize?: number;
  latencyGapMs?: number;
  idleMs?: number;
  /** Bound for the timed part of the run. */
  timeoutMs: number;
  /** The variant's group: scenario 9's rule (see flow.ts). */
  group?: string;
  /** make-scale: delayed rows, when not as many as the archived ones (`n`). */
  delayed?: number;
  /** Scenario 10: worker processes (see processes.ts), and the queue's globalConcurrency in its limited rows. */
  processes?: number;
  globalConcurrency?: number;
  /** Scenario 11, DBOS: the queue's minPollingIntervalMs (see workflows.ts). */
  pollMs?: number;
  /** Scenario 11, wakeup: ms from the first start to the instant every workflow sleeps until. */
  leadMs?: number;
}

export interface RunResult {
  ok: boolean;
  metrics: Record<string, number | null>;
  notes: string[];
  settings?: string;
  error?: string;
}
