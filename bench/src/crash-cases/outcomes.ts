/**
 * What each case left in the database, read after the surviving worker has ended every job or task
 * there was: the orders, each library's own job / task rows, the handler runs recorded by
 * crash_demo_run and the counter. Nothing here is assumed; `safe` says whether it is the outcome a
 * transactional outbox promises (the demonstration requires it of pg-queue only).
 */
import type { Client } from 'pg';

export type Lib = 'bullmq' | 'pg-queue';
export type CaseId = 'a' | 'b' | 'c';

export interface Outcome {
  text: string;
  safe: boolean;
}

interface Row {
  state: string;
  attempts: number;
}

/** The library's jobs or tasks of a queue (live and finished) that match `where` (`$payload` is their payload, `$2` the value). */
async function rows(db: Client, lib: Lib, queue: string, where: string, value: string | null): Promise<Row[]> {
  const sql =
    lib === 'bullmq'
      ? `SELECT state::text AS state, attempts_made AS attempts FROM bullmq.job WHERE queue = $1 AND ${where.replace('$payload', 'data')}`
      : `SELECT state, attempt AS attempts FROM pgqueue.task WHERE queue = $1 AND ${where.replace('$payload', 'payload')}
         UNION ALL
         SELECT state, attempt FROM pgqueue.task_archive WHERE queue = $1 AND ${where.replace('$payload', 'payload')}`;
  return (await db.query(sql, value === null ? [queue] : [queue, value])).rows;
}

async function runs(db: Client, lib: Lib, queue: string, ref?: string): Promise<number> {
  const r = await db.query(`SELECT count(*)::int AS n FROM crash_demo_run WHERE lib = $1 AND queue = $2 AND ($3::text IS NULL OR ref = $3)`, [lib, queue, ref ?? null]);
  return r.rows[0].n;
}

function describe(lib: Lib, found: Row[]): string {
  const noun = lib === 'bullmq' ? 'job' : 'task';
  const states = found.map((r) => r.state).join(', ');
  return `${found.length} ${noun}${found.length === 1 ? '' : 's'}${found.length ? ` (${states})` : ''}`;
}

/** The jobs or tasks that exist for a queue, for the surviving worker to wait on: those not ended. */
export async function unfinished(db: Client, lib: Lib): Promise<number> {
  const sql =
    lib === 'bullmq'
      ? `SELECT count(*)::int AS n FROM bullmq.job WHERE state NOT IN ('completed', 'failed')`
      : `SELECT count(*)::int AS n FROM pgqueue.task`;
  return (await db.query(sql)).rows[0].n;
}

export async function readOutcomes(db: Client, lib: Lib, orderIds: { a: number; b: number }): Promise<Record<CaseId, Outcome>> {
  // (a) The order was committed, then its process died.
  const [orderA] = (await db.query(`SELECT status FROM orders WHERE id = $1`, [orderIds.a])).rows;
  const forA = await rows(db, lib, 'order.confirm', `$payload->>'orderId' = $2`, String(orderIds.a));
  const runsA = await runs(db, lib, 'order.confirm', String(orderIds.a));
  const status = orderA?.status ?? 'missing';
  const a: Outcome = {
    text: `${status === 'confirmed' ? `order confirmed` : `order stays '${status}', never confirmed`}: ${describe(lib, forA)}, ran ${runsA}x`,
    safe: status === 'confirmed' && forA.length === 1 && runsA === 1,
  };

  // (b) The job or task was written in a transaction that then rolled back.
  const ordersB = (await db.query(`SELECT count(*)::int AS n FROM orders WHERE id = $1`, [orderIds.b])).rows[0].n;
  const forB = await rows(db, lib, 'order.confirm', `$payload->>'orderId' = $2`, String(orderIds.b));
  const runsB = await runs(db, lib, 'order.confirm', String(orderIds.b));
  const b: Outcome = {
    text: `${ordersB ? 'the order exists' : 'no order'}; ${describe(lib, forB)}, ran ${runsB}x${runsB && !ordersB ? ' against the missing order' : ''}`,
    safe: ordersB === 0 && forB.length === 0 && runsB === 0,
  };

  // (c) The worker was killed after its write, before the job or task completed.
  const counter = (await db.query(`SELECT value FROM crash_demo_counter WHERE lib = $1`, [lib])).rows[0].value as number;
  const forC = await rows(db, lib, 'counter.bump', 'true', null);
  const runsC = await runs(db, lib, 'counter.bump');
  const c: Outcome = {
    text: `counter = ${counter}: ran ${runsC}x, ${describe(lib, forC)}`,
    safe: counter === 1 && forC.length === 1 && forC[0].state === 'done',
  };
  return { a, b, c };
}
