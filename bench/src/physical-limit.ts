import { randomBytes } from 'node:crypto';
import type { Client } from 'pg';
import { DEFAULT_HANDLER_OPTIONS } from '../../libs/pg-queue/src/pg-queue.options';
import { claimStatements } from '../../libs/pg-queue/src/sql/claim.sql';
import { completeStatements } from '../../libs/pg-queue/src/sql/complete.sql';
import { printSchemaSql } from '../../libs/pg-queue/src/sql/schema.sql';
import { notifyChannel } from '../../libs/pg-queue/src/sql/identifiers';
import { leaseParams, parseIds } from '../../libs/pg-queue/src/sql/task.repository';
import { QUEUE, connect } from './common';

const SCHEMA = 'pgqueue';
/** pg-queue's defaults: batchSize (the claim ceiling a fast queue reaches), leaseMs 60 000, retryBlocksGroup true, finished: 'archive'. */
export const LIMIT_BATCH = DEFAULT_HANDLER_OPTIONS.batchSize;
const LEASE_MS = 60_000;
/** The transactional runner's idle-in-transaction limit at the default handler timeout. */
const IDLE_LIMIT_MS = String(DEFAULT_HANDLER_OPTIONS.timeoutMs + 1000);

/** No follow-up rows ($3 of `complete`): no task enqueues a follow-up. */
const NO_FOLLOW_UPS = '[]';

/** Installs pg-queue's schema with its own printed SQL and inserts `n` pending no-op tasks. */
export async function prepareLimit(db: Client, n: number): Promise<void> {
  await db.query(printSchemaSql(SCHEMA));
  await db.query(
    `INSERT INTO ${SCHEMA}.task (queue, payload) SELECT $1, jsonb_build_object('seq', g) FROM generate_series(1, $2::int) g`,
    [QUEUE, n],
  );
  await db.query(`VACUUM ANALYZE ${SCHEMA}.task`);
}

/** The loops' connections, opened before the clock starts: a limit should not include connecting. */
export function openLimitClients(url: string, concurrency: number): Promise<Client[]> {
  return Promise.all(Array.from({ length: concurrency }, () => connect(url)));
}

/**
 * The "physical limit": no library, no Nest, no Prisma. One loop per client, each doing only:
 * claim a batch (pg-queue's claim statement) → complete the batch (pg-queue's complete statement,
 * archiving), all as named prepared statements, until a claim comes back empty. The transactional
 * path completes inside `BEGIN` → lock the leases (pg-queue's lockLeases) → complete → `COMMIT`,
 * the statements the transactional runner adds. Returns the number of tasks completed.
 */
export async function runLimit(clients: Client[], mode: 'lease' | 'transactional'): Promise<number> {
  const { claim, lockLeases } = claimStatements(SCHEMA);
  const complete = completeStatements(SCHEMA, 'archive').complete;
  const channel = notifyChannel(SCHEMA);
  const workerId = `bench-limit:${process.pid}:${randomBytes(3).toString('hex')}`;
  let done = 0;
  await Promise.all(
    clients.map(async (c) => {
      for (;;) {
        const res0 = await c.query<{ claimed: string }>({
          name: 'claim',
          text: claim,
          values: [QUEUE, LIMIT_BATCH, workerId, LEASE_MS, true],
        });
        const claimed = JSON.parse(res0.rows[0].claimed) as { id: string; lease_token: string }[];
        if (claimed.length === 0) return;
        const leases = leaseParams(claimed.map((r) => ({ id: r.id, token: r.lease_token })));
        if (mode === 'transactional') {
          await c.query('BEGIN');
          await c.query({ name: 'lock', text: lockLeases, values: [...leases, IDLE_LIMIT_MS] });
        }
        const res = await c.query<{ done_ids: string }>({ name: 'complete', text: complete, values: [...leases, NO_FOLLOW_UPS, channel] });
        if (mode === 'transactional') await c.query('COMMIT');
        done += parseIds(res.rows[0].done_ids).length;
      }
    }),
  );
  return done;
}
