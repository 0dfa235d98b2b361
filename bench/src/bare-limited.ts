import type { Client } from 'pg';
import { LimitsRepository, type QueueLimits } from '../../libs/pg-queue/src/sql/limits.repository';
import { completeStatements } from '../../libs/pg-queue/src/sql/complete.sql';
import { notifyChannel } from '../../libs/pg-queue/src/sql/identifiers';
import { leaseParams, type ClaimedRow } from '../../libs/pg-queue/src/sql/statement-values';
import type { PrismaClientLike } from '../../libs/pg-queue/src/types';
import { DEFAULT_HANDLER_OPTIONS } from '../../libs/pg-queue/src/pg-queue.options';
import { QUEUE } from './common';
import { SCHEMA, prepareLimit } from './physical-limit';

/**
 * Scenario 9's bound for a limited queue: what a rule allows with no library around pg-queue's
 * statements. Bare `pg` clients (named prepared statements, no Prisma, no Nest, no worker) run the
 * cycle an ideal lease worker would: claim_limited for its free slots, then, at once, the
 * completion of what it claimed on one connection and the next claim on another, the claim
 * counting those tasks as free (the `ending` tokens, as the worker sends them when its handlers
 * return). With no-op handlers a slot-holding rule caps a drain at its slots per cycle, and a
 * cycle is a claim's round trip, commit included: these rows measure that cap on this machine.
 */

const COMPLETE = completeStatements(SCHEMA, 'archive').complete;
const CHANNEL = notifyChannel(SCHEMA);

/** A PrismaClientLike over a bare client, so the claim is LimitsRepository's own call (one statement). */
function executor(c: Client): PrismaClientLike {
  const names = new Map<string, string>();
  const name = (text: string) => names.get(text) ?? (names.set(text, `s${names.size}`), `s${names.size - 1}`);
  return {
    $queryRawUnsafe: async <T>(text: string, ...values: unknown[]) => (await c.query({ name: name(text), text, values })).rows as T,
    $executeRawUnsafe: async (text: string, ...values: unknown[]) => (await c.query({ name: name(text), text, values })).rowCount ?? 0,
    $transaction: () => Promise.reject(new Error('bare loop: no interactive transactions')),
    $disconnect: () => Promise.resolve(),
  };
}

/** Installs the schema and `n` pending no-op tasks, spread over `partitions` partitions (0: none). */
export async function prepareBareLimited(db: Client, n: number, partitions: number): Promise<void> {
  await prepareLimit(db, n);
  if (partitions > 0) {
    await db.query(`UPDATE ${SCHEMA}.task SET partition_key = 'p' || ((payload->>'seq')::int % $1)`, [partitions]);
    await db.query(`VACUUM ANALYZE ${SCHEMA}.task`);
  }
}

/**
 * Drains the queue under `limits` with `slots` handler slots on two clients (claims on `a`,
 * completions on `b`); returns the tasks completed.
 */
export async function runBareLimited(a: Client, b: Client, limits: QueueLimits, slots: number): Promise<number> {
  const repo = new LimitsRepository(SCHEMA);
  const claimer = executor(a);
  const { leaseMs, maxAttempts } = DEFAULT_HANDLER_OPTIONS;
  const claim = async (ending: string[]) => (await repo.claim(claimer, QUEUE, slots, 'bench-bare-limited', leaseMs, maxAttempts, limits, undefined, ending)).rows;
  const complete = async (rows: ClaimedRow[]) => {
    const ranAgo = rows.map(() => '0.0').join(',');
    const leases = leaseParams(rows.map((r) => ({ id: r.id, token: r.lease_token })));
    await b.query({ name: 'complete', text: COMPLETE, values: [...leases, '[]', CHANNEL, ranAgo, ranAgo, '{}'] });
  };
  let done = 0;
  let rows = await claim([]);
  for (;;) {
    if (rows.length === 0) {
      // A claim that found nothing: done when nothing is left, else (a partitioned walk cut short) again.
      const left = Number((await b.query(`SELECT count(*) AS n FROM ${SCHEMA}.task WHERE queue = $1`, [QUEUE])).rows[0].n);
      if (left === 0) return done;
      rows = await claim([]);
      continue;
    }
    const [next] = await Promise.all([claim(rows.map((r) => r.lease_token)), complete(rows)]);
    done += rows.length;
    rows = next;
  }
}
