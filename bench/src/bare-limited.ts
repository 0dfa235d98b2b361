import type { Client } from 'pg';
import { LimitsRepository, type QueueLimits } from '../../libs/pg-queue/src/sql/limits.repository';
import { completeStatements } from '../../libs/pg-queue/src/sql/complete.sql';
import { ROW_LOCK_WAIT_MS } from '../../libs/pg-queue/src/sql/fragments.sql';
import { notifyChannel } from '../../libs/pg-queue/src/sql/identifiers';
import { queueStatementName } from '../../libs/pg-queue/src/sql/statement-names';
import { leaseParams, parseIds, type ClaimedRow } from '../../libs/pg-queue/src/sql/statement-values';
import type { PrismaClientLike } from '../../libs/pg-queue/src/types';
import { DEFAULT_HANDLER_OPTIONS } from '../../libs/pg-queue/src/pg-queue.options';
import { QUEUE } from './common';
import { SCHEMA, installBacklog } from './physical-limit';

/**
 * Scenario 9's bound for a limited queue: what a rule allows with no library around pg-queue's
 * statements. Bare `pg` clients (named prepared statements, no Prisma, no Nest, no worker) run
 * what an ideal lease worker would with no-op handlers: claim_limited for its free slots; then at
 * once the next claim on one connection, counting every claimed task whose completion is not
 * written yet as free (the `ending` tokens, as the worker sends them once its handlers return),
 * while the completions go out on another, batched as the worker's CompletionBatcher does (one
 * statement in flight, the rest merged into the next). A slot-holding rule then caps a drain at
 * its slots per claim: these rows measure that cap on this machine.
 */

/** The completion a lease worker sends (outside a transaction: its row-lock wait bounded). */
const COMPLETE = completeStatements(SCHEMA, 'archive', ROW_LOCK_WAIT_MS).complete;
const CHANNEL = notifyChannel(SCHEMA);

/**
 * A PrismaClientLike over a bare client, so the claim is LimitsRepository's own call (one
 * statement), prepared under the name the module gives it through Prisma (queueStatementName).
 */
function executor(c: Client): PrismaClientLike {
  const name = (text: string) => queueStatementName({ sql: text }) || undefined;
  return {
    $queryRawUnsafe: async <T>(text: string, ...values: unknown[]) => (await c.query({ name: name(text), text, values })).rows as T,
    $executeRawUnsafe: async (text: string, ...values: unknown[]) => (await c.query({ name: name(text), text, values })).rowCount ?? 0,
    $transaction: () => Promise.reject(new Error('bare loop: no interactive transactions')),
    $disconnect: () => Promise.resolve(),
  };
}

/**
 * Installs the schema and `n` pending no-op tasks, spread over `partitions` partitions (0: none),
 * then ANALYZE: as the library's rows enqueue theirs.
 */
export async function prepareBareLimited(db: Client, n: number, partitions: number): Promise<void> {
  await installBacklog(db, n, partitions);
  await db.query('ANALYZE');
}

/** What a bare drain did: tasks completed, and the claims that took any. */
export interface BareDrain {
  completed: number;
  claims: number;
}

/**
 * Drains the queue under `limits` with `slots` handler slots, claims on `a`, completions on `b`.
 * Throws past `deadline` (epoch ms), or when a completion finishes fewer tasks than it carried.
 */
export async function runBareLimited(a: Client, b: Client, limits: QueueLimits, slots: number, deadline: number): Promise<BareDrain> {
  const repo = new LimitsRepository(SCHEMA);
  const claimer = executor(a);
  const { leaseMs, maxAttempts } = DEFAULT_HANDLER_OPTIONS;
  const claim = async (ending: string[]) => (await repo.claim(claimer, QUEUE, slots, 'bench-bare-limited', leaseMs, maxAttempts, limits, undefined, ending)).rows;
  const writer = new CompletionWriter(b);
  const result: BareDrain = { completed: 0, claims: 0 };
  let rows = await claim([]);
  for (;;) {
    if (Date.now() > deadline) throw new Error(`bare loop: ${result.completed} tasks completed by its deadline`);
    if (rows.length === 0) {
      // Nothing claimable: done once every completion is written and no task is left.
      result.completed = await writer.flushed();
      const left = Number((await b.query(`SELECT count(*) AS n FROM ${SCHEMA}.task WHERE queue = $1`, [QUEUE])).rows[0].n);
      if (left === 0) return result;
      rows = await claim([]);
      continue;
    }
    result.claims += 1;
    writer.add(rows); // the handlers are no-ops: they return at once
    rows = await claim(writer.ending());
  }
}

/** Completions as a lease worker writes them: one statement in flight, the rest merged into the next. */
class CompletionWriter {
  private queued: ClaimedRow[] = [];
  private writing: ClaimedRow[] = [];
  private inFlight: Promise<void> | null = null;
  private failure: unknown = null;
  completed = 0;

  constructor(private readonly db: Client) {}

  add(rows: ClaimedRow[]): void {
    this.queued.push(...rows);
    this.inFlight ??= this.drain();
  }

  /** Tokens of the tasks whose completion is not written yet. */
  ending(): string[] {
    if (this.failure) throw this.failure;
    return [...this.writing, ...this.queued].map((r) => r.lease_token);
  }

  /** Waits until every completion added is written; returns the tasks completed. */
  async flushed(): Promise<number> {
    while (this.inFlight) await this.inFlight;
    if (this.failure) throw this.failure;
    return this.completed;
  }

  private async drain(): Promise<void> {
    try {
      while (this.queued.length > 0) {
        this.writing = this.queued;
        this.queued = [];
        const ranAgo = this.writing.map(() => '0.0').join(',');
        const leases = leaseParams(this.writing.map((r) => ({ id: r.id, token: r.lease_token })));
        const res = await this.db.query<{ done_ids: string }>({ name: 'complete', text: COMPLETE, values: [...leases, '[]', CHANNEL, ranAgo, ranAgo, '{}'] });
        const done = parseIds(res.rows[0].done_ids).length;
        if (done !== this.writing.length) throw new Error(`bare loop: a completion of ${this.writing.length} tasks finished ${done}`);
        this.completed += done;
        this.writing = [];
      }
    } catch (err) {
      this.failure = err;
    } finally {
      this.inFlight = null;
    }
  }
}
