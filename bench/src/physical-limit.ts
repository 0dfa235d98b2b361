import { randomBytes } from 'node:crypto';
import type { Client } from 'pg';
import { DEFAULT_HANDLER_OPTIONS } from '../../libs/pg-queue/src/pg-queue.options';
import { claimedRows, claimSql, claimStatements, newClaimId } from '../../libs/pg-queue/src/sql/claim.sql';
import { completeStatements } from '../../libs/pg-queue/src/sql/complete.sql';
import { printSchemaSql } from '../../libs/pg-queue/src/sql/schema.sql';
import { notifyChannel } from '../../libs/pg-queue/src/sql/identifiers';
import { leaseParams, parseIds } from '../../libs/pg-queue/src/sql/statement-values';
import { IDLE_GRACE_MS, STATEMENT_GRACE_MS } from '../../libs/pg-queue/src/worker/transactional.runner';
import { QUEUE, connect } from './common';

/** The schema every bare-pg measurement installs (scenarios 4 and 7). */
export const SCHEMA = 'pgqueue';
/** pg-queue's defaults: batchSize (the claim ceiling a fast queue reaches), leaseMs 60 000, maxAttempts 5, finished: 'archive'. */
export const LIMIT_BATCH = DEFAULT_HANDLER_OPTIONS.batchSize;
/** The transactional runner's idle-in-transaction limit at the default handler timeout. */
const IDLE_LIMIT_MS = String(DEFAULT_HANDLER_OPTIONS.timeoutMs + IDLE_GRACE_MS);
/** And its statement backstop. */
const STATEMENT_LIMIT_MS = String(DEFAULT_HANDLER_OPTIONS.timeoutMs + STATEMENT_GRACE_MS);

/** No results (the last parameter of `complete`): the bench handlers return nothing. */
const NO_RESULTS = '{}';
/** No follow-up rows ($3 of `complete`): no task enqueues a follow-up. */
const NO_FOLLOW_UPS = '[]';

/** Installs pg-queue's schema with its own printed SQL and inserts `n` pending no-op tasks. */
export async function prepareLimit(db: Client, n: number): Promise<void> {
  await installBacklog(db, n);
  await db.query(`VACUUM ANALYZE ${SCHEMA}.task`);
}

/**
 * pg-queue's schema (its own printed SQL) and `n` pending no-op tasks, spread over `partitions`
 * partitions (0: none), for the bare loops.
 */
export async function installBacklog(db: Client, n: number, partitions = 0): Promise<void> {
  await db.query(printSchemaSql(SCHEMA));
  await db.query(
    `INSERT INTO ${SCHEMA}.task (queue, payload, partition_key)
     SELECT $1, jsonb_build_object('seq', g), CASE WHEN $3::int > 0 THEN 'p' || (g % $3::int) END FROM generate_series(1, $2::int) g`,
    [QUEUE, n, partitions],
  );
}

/** One claimed batch of pg-queue's worker path on a bare client (see runBatch). */
export interface BatchResult {
  claimed: number;
  completed: number;
}

const STATEMENTS = {
  ...claimStatements(SCHEMA),
  claim: claimSql(claimStatements(SCHEMA), LIMIT_BATCH),
  complete: completeStatements(SCHEMA, 'archive').complete,
};
const CHANNEL = notifyChannel(SCHEMA);

/**
 * pg-queue's worker path for one batch, as named prepared statements on a bare client: claim up to
 * batchSize, call `onTask` for each claimed payload, complete. The transactional path calls the
 * handlers and completes inside `BEGIN` → lock the leases (lockLeases) → … → `COMMIT`, the
 * statements the transactional runner adds; a failure rolls it back. `claimed` 0: nothing was due.
 */
export async function runBatch(c: Client, mode: 'lease' | 'transactional', workerId: string, onTask?: (payload: unknown) => void): Promise<BatchResult> {
  const res0 = await c.query<{ claimed: string }>({
    name: 'claim',
    text: STATEMENTS.claim,
    values: [QUEUE, LIMIT_BATCH, workerId, DEFAULT_HANDLER_OPTIONS.leaseMs, DEFAULT_HANDLER_OPTIONS.maxAttempts, newClaimId()],
  });
  const rows = claimedRows(res0.rows[0].claimed, QUEUE);
  if (rows.length === 0) return { claimed: 0, completed: 0 };
  const leases = leaseParams(rows.map((r) => ({ id: r.id, token: r.lease_token })));
  const handleAndComplete = async () => {
    if (onTask) for (const r of rows) onTask(r.payload);
    // Run times as the library sends them (ms before the statement; the archive records them).
    const ranAgo = rows.map(() => '0.0').join(',');
    const res = await c.query<{ done_ids: string }>({ name: 'complete', text: STATEMENTS.complete, values: [...leases, NO_FOLLOW_UPS, CHANNEL, ranAgo, ranAgo, NO_RESULTS] });
    return { claimed: rows.length, completed: parseIds(res.rows[0].done_ids).length };
  };
  if (mode === 'lease') return handleAndComplete();
  await c.query('BEGIN');
  try {
    await c.query({ name: 'lock', text: STATEMENTS.lockLeases, values: [...leases, IDLE_LIMIT_MS, STATEMENT_LIMIT_MS] });
    const result = await handleAndComplete();
    await c.query('COMMIT');
    return result;
  } catch (err) {
    await c.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}

/** The loops' connections, opened before the clock starts: a limit should not include connecting. */
export function openLimitClients(url: string, concurrency: number): Promise<Client[]> {
  return Promise.all(Array.from({ length: concurrency }, () => connect(url)));
}

/**
 * The "physical limit": no library, no Nest, no Prisma. One loop per client, each running
 * runBatch (archiving completions) until a claim comes back empty. Returns the number of tasks
 * completed.
 */
export async function runLimit(clients: Client[], mode: 'lease' | 'transactional'): Promise<number> {
  const workerId = `bench-limit:${process.pid}:${randomBytes(3).toString('hex')}`;
  let done = 0;
  await Promise.all(
    clients.map(async (c) => {
      for (;;) {
        const { claimed, completed } = await runBatch(c, mode, workerId);
        if (claimed === 0) return;
        done += completed;
      }
    }),
  );
  return done;
}
