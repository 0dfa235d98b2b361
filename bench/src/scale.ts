import { performance } from 'node:perf_hooks';
import type { INestApplicationContext } from '@nestjs/common';
import type { Client } from 'pg';
import { DEFAULT_HANDLER_OPTIONS, TaskQueue, type SqlExecutor } from '@app/pg-queue';
import { QueueMetrics } from '@app/pg-queue/metrics';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import { QUEUE } from './common';

/**
 * Scenario 8: what must stay flat as history grows. pg-queue only. The same operations, each
 * called `calls` times through the library (after a few untimed calls, so caches and prepared
 * statements are warm), in a database cloned from a template with no tasks, or with N archived and
 * N delayed tasks of the queue (PgQueueTarget.insertArchived + insertDelayed):
 * - scrape: QueueMetrics.metrics(), what every Prometheus scrape of every instance runs;
 * - idleClaim: the worker's claim (TaskRepository.claim, with the arguments the worker passes)
 *   while nothing is due;
 * - list, get: the operator API's first page of the queue, and an archived task by id;
 * - claim: the worker's claim of BATCH due tasks, from a backlog inserted for it (last, since it
 *   leaves running tasks behind).
 * Per operation: the median wall time of a call, and from pg_stat_statements (reset after the
 * warm-up) the server's execution time, shared buffers and statements per call.
 */
export const SCALE_OPS = ['scrape', 'idleClaim', 'list', 'get', 'claim'] as const;
export type ScaleOp = (typeof SCALE_OPS)[number];

const WARM_UP = 10;
const BATCH = 100;

export interface ServerTotals {
  /** Statements executed in the run's database since the last reset. */
  calls: number;
  execMs: number;
  blocks: number;
}

export interface ScaleProbe {
  reset(): Promise<void>;
  totals(): Promise<ServerTotals>;
}

/** `prisma`: the client the module was given (the worker claims through it). */
export async function runScale(
  app: INestApplicationContext,
  prisma: SqlExecutor,
  db: Client,
  probe: ScaleProbe | null,
  calls: number,
  deadline: number,
): Promise<Record<string, number | null>> {
  const queue = app.get(TaskQueue);
  const metrics = app.get(QueueMetrics);
  const repo = app.get(TaskRepository, { strict: false });
  const o = DEFAULT_HANDLER_OPTIONS;
  const claim = (limit: number) => repo.claim(prisma, QUEUE, limit, `bench-scale:${process.pid}`, o.leaseMs, o.maxAttempts);
  const archived = await db.query<{ id: string }>(`SELECT id::text AS id FROM pgqueue.task_archive ORDER BY id LIMIT 1 OFFSET (SELECT count(*) / 2 FROM pgqueue.task_archive)`);
  const archivedId = archived.rows[0]?.id ?? '1';

  const ops: Record<ScaleOp, () => Promise<unknown>> = {
    scrape: () => metrics.metrics(),
    idleClaim: async () => {
      const c = await claim(BATCH);
      if (c.rows.length !== 0) throw new Error(`idle claim: ${c.rows.length} tasks were due`);
    },
    list: () => queue.list({ queue: QUEUE, limit: 100 }),
    get: () => queue.get(archivedId),
    claim: async () => {
      const c = await claim(BATCH);
      if (c.rows.length !== BATCH) throw new Error(`claim: ${c.rows.length} of ${BATCH} due tasks`);
    },
  };

  const out: Record<string, number | null> = {};
  for (const op of SCALE_OPS) {
    if (op === 'claim') {
      // The backlog the due claims take from, then the ANALYZE autovacuum would soon run.
      await db.query(
        `INSERT INTO pgqueue.task (queue, payload, run_at) SELECT $1, jsonb_build_object('due', g), now() - interval '1 minute' FROM generate_series(1, $2::int) g`,
        [QUEUE, (calls + WARM_UP) * BATCH],
      );
      await db.query('ANALYZE pgqueue.task');
    }
    for (let i = 0; i < WARM_UP; i++) await ops[op]();
    await probe?.reset();
    const times: number[] = [];
    for (let i = 0; i < calls; i++) {
      const t0 = performance.now();
      await ops[op]();
      times.push(performance.now() - t0);
      if (Date.now() > deadline) throw new Error(`timed out in ${op} after ${i + 1} calls`);
    }
    const server = await probe?.totals();
    times.sort((a, b) => a - b);
    out[`${op}Ms`] = times[Math.floor(times.length / 2)];
    out[`${op}ServerMs`] = server ? server.execMs / calls : null;
    out[`${op}Blocks`] = server ? server.blocks / calls : null;
    out[`${op}Statements`] = server ? server.calls / calls : null;
  }
  return out;
}
