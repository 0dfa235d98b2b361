import { Client } from 'pg';

/** The one queue every library works on: no-op tasks with a tiny payload. */
export const QUEUE = 'bench_noop';

export interface Payload {
  seq: number;
}

/** What every library adapter offers the scenarios. One instance per child process and run. */
export interface BenchTarget {
  /** Installs/opens the library (schema, pools); starts no worker. */
  open(): Promise<void>;
  /** Enqueues one task through the library's single-task API. */
  enqueueOne(payload: Payload): Promise<void>;
  /** Enqueues many tasks in one call of the library's bulk API. */
  enqueueMany(payloads: Payload[]): Promise<void>;
  /** Starts consuming; `onTask` is called at the start of every handler invocation. */
  startWorker(onTask: (payload: Payload) => void): Promise<void>;
  /** Tasks of the bench queue that are not finished (pending, running, retrying) per the database. */
  unfinished(db: Client): Promise<number>;
  /** Tasks that the library ended failed although their (no-op) handler returned; where it can tell. */
  failedAfterHandler?(db: Client): Promise<number>;
  /** Tasks of the bench queue that exist in any state, finished ones included where kept. */
  stored(db: Client): Promise<number>;
  /**
   * Fills the library's own tables, in its own format, with `n` finished tasks, as if they had run
   * through it (see BENCHMARKS.md for how per library). Called once on a template database.
   */
  insertHistory(db: Client, n: number): Promise<void>;
  /** SQL ILIKE pattern that picks the library's claim statement out of pg_stat_statements. */
  readonly claimStatementPattern: string;
  /** The settings in effect, for the report. */
  describe(): string;
  close(): Promise<void>;
}

export interface TargetOptions {
  url: string;
  concurrency: number;
  mode?: 'transactional' | 'lease';
  /** BullMQ: `production` (removeOnComplete/removeOnFail as its production guide advises, the default) or `defaults`. */
  preset?: 'production' | 'defaults';
  /** pg-queue: import PgQueueMetricsModule (scenario 8 scrapes it; an app without metrics does not pay for them). */
  metrics?: boolean;
  /** pg-queue: the queue's globalConcurrency (scenario 10's limited rows); absent: none. */
  globalConcurrency?: number;
}

/** Pool size given to every library: max(10, concurrency + 2) (graphile-worker's documented advice). */
export function poolSize(concurrency: number): number {
  return Math.max(10, concurrency + 2);
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export async function connect(url: string): Promise<Client> {
  const c = new Client({ connectionString: url });
  await c.connect();
  return c;
}

/** Polls `check` every `everyMs` until it returns true; throws after `timeoutMs`. */
export async function waitFor(what: string, check: () => boolean | Promise<boolean>, timeoutMs: number, everyMs = 10): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

export function chunks<T>(items: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

export function payloads(n: number, from = 0): Payload[] {
  return Array.from({ length: n }, (_, i) => ({ seq: from + i }));
}

/** Starts a timed part with no dirty buffers left over from setup. Needs superuser or pg_checkpoint; skipped otherwise. */
export async function checkpoint(db: Client): Promise<void> {
  await db.query('CHECKPOINT').catch(() => undefined);
}

/** The drains' backlog: `n` tasks through the library's bulk API (not timed), checked, then ANALYZE. */
export async function prefill(target: BenchTarget, db: Client, n: number, bulkSize: number): Promise<void> {
  for (const part of chunks(payloads(n), bulkSize)) await target.enqueueMany(part);
  const pending = await target.unfinished(db);
  if (pending !== n) throw new Error(`prefill: expected ${n} unfinished tasks, found ${pending}`);
  // Steady state: autovacuum would have analyzed a table that just grew by a backlog like this one
  // (within autovacuum_naptime); a never-analyzed table makes some claim plans several times slower.
  // BENCH_ANALYZE=0 measures that cold state instead.
  if (process.env.BENCH_ANALYZE !== '0') await db.query('ANALYZE');
}
