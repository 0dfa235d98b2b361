import { Injectable } from '@nestjs/common';
import { NonRetryableError, TaskHandler, WorkerOrchestrator, type Task } from '@app/pg-queue';
import { PgQueueMetricsModule, QueueMetrics } from '@app/pg-queue/metrics';
import { drainQueue } from '@app/pg-queue/testing';
import { METRICS_COUNT_CAP, inspectStatements } from '../../libs/pg-queue/src/sql/inspect.sql';
import type { PrismaClient } from '../../src/generated/prisma/client';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { resetStatementStats, THIS_DATABASE } from '../support/statement-stats';

@Injectable()
class Work {
  @TaskHandler('obs.q', { mode: 'lease' })
  async run(task: Task<{ fail?: boolean }>) {
    if (task.payload.fail) throw new NonRetryableError('nope');
  }
}

/** The value of one sample line of the exposition text, or undefined when the series is absent. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('observability', () => {
  let db: TestDatabase;
  let qa: QueueApp;
  beforeAll(async () => {
    db = await createTestDatabase();
    qa = await bootQueueApp(db.prisma(), [Work], { autoStart: false }, [PgQueueMetricsModule]);
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });

  it('exposes Prometheus metrics: outcomes and durations from events, queue depth from the database', async () => {
    await qa.queue.enqueueMany([{ queue: 'obs.q', payload: {} }, { queue: 'obs.q', payload: {} }, { queue: 'obs.q', payload: { fail: true } }]);
    await qa.queue.enqueue('obs.q', {}, { delayMs: 60_000 });
    await drainQueue(qa.app, 'obs.q');
    await qa.queue.enqueue('obs.q', {}, { runAt: new Date(Date.now() - 5_000) }); // due, waiting
    const text = await qa.app.get(QueueMetrics).metrics();
    expect(text).toContain('pgqueue_task_outcomes_total{queue="obs.q",outcome="completed"} 2');
    expect(text).toContain('pgqueue_task_outcomes_total{queue="obs.q",outcome="dead"} 1');
    expect(text).toContain('pgqueue_task_duration_seconds_count{queue="obs.q",outcome="completed"} 2');
    // Queue depth: due (the delayed task is not due), running, dead; the archive is not counted.
    expect(text).toContain('pgqueue_tasks{queue="obs.q",state="due"} 1');
    expect(text).toContain('pgqueue_tasks{queue="obs.q",state="running"} 0');
    expect(text).toContain('pgqueue_tasks{queue="obs.q",state="dead"} 1');
    expect(text).not.toContain('state="done"');
    expect(sample(text, 'pgqueue_oldest_pending_seconds{queue="obs.q"}')).toBeGreaterThanOrEqual(4);
    // The operator API still counts everything, the archive and the delayed task included.
    expect((await qa.queue.stats()).find((s) => s.queue === 'obs.q')).toMatchObject({ pending: 2, dead: 1, done: 2 });
  });

  it('counts tasks waiting for their dependencies in metrics, health and stats, and names the oldest due task one way', async () => {
    const parent = await qa.queue.enqueue('obs.parent', {}, { delayMs: 3_600_000 });
    await qa.queue.enqueueMany([{ queue: 'obs.join', payload: {}, options: { dependsOn: [parent] } }, { queue: 'obs.join', payload: {}, options: { dependsOn: [parent] } }]);
    await qa.queue.enqueue('obs.due', {}, { runAt: new Date(Date.now() - 3_000) });
    const text = await qa.app.get(QueueMetrics).metrics();
    // A queue with only waiting tasks is listed, with its waiting count.
    expect(text).toContain('pgqueue_tasks{queue="obs.join",state="waiting"} 2');
    expect(text).toContain('pgqueue_tasks{queue="obs.parent",state="waiting"} 0');
    expect(sample(text, 'pgqueue_oldest_due_seconds{queue="obs.due"}')).toBeGreaterThanOrEqual(2);
    const health = await qa.app.get(WorkerOrchestrator).health();
    expect(health.queues.find((q) => q.queue === 'obs.join')).toMatchObject({ waiting: 2, due: 0 });
    const stats = (await qa.queue.stats()).find((s) => s.queue === 'obs.due');
    expect(stats?.oldestDueMs).toBeGreaterThanOrEqual(2_000);
  });

  it('keeps reporting a queue that emptied, at zero', async () => {
    const id = await qa.queue.enqueue('obs.gone', {});
    expect(await qa.app.get(QueueMetrics).metrics()).toContain('pgqueue_tasks{queue="obs.gone",state="due"} 1');
    await qa.queue.cancel(id); // to the archive: the hot table no longer knows the queue
    const text = await qa.app.get(QueueMetrics).metrics();
    expect(text).toContain('pgqueue_tasks{queue="obs.gone",state="due"} 0');
    expect(text).toContain('pgqueue_oldest_pending_seconds{queue="obs.gone"} 0');
  });

  it('reports throughput and run time per hour (the seed query)', async () => {
    const hours = await qa.queue.hourly({ queue: 'obs.q' });
    expect(hours).toHaveLength(1);
    expect(hours[0]).toMatchObject({ queue: 'obs.q', done: 2 });
    expect(hours[0].avgMs).toBeGreaterThanOrEqual(0);
    expect(hours[0].hour.getUTCMinutes()).toBe(0);
  });
});

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  'Shared Hit Blocks': number;
  'Shared Read Blocks': number;
  Plans?: PlanNode[];
}

function nodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodes)];
}

/**
 * A scrape must cost the same however much history and how many delayed tasks there are: it
 * reads neither the archive nor the not-yet-due rows; an operator's page reads a page. Checked on
 * the plans of the statements the calls actually run (captured from the Prisma client), by rows
 * and buffers, not by time.
 */
describe('observability: scrapes and operator pages do not grow with history', () => {
  const ROWS = 50_000;
  let db: TestDatabase;
  let prisma: PrismaClient;
  let qa: QueueApp;
  beforeAll(async () => {
    db = await createTestDatabase();
    prisma = db.prisma();
    qa = await bootQueueApp(prisma, [], { autoStart: false }, [PgQueueMetricsModule]);
    // The bench's way of making history (bench/src/targets/pg-queue.ts): rows through the hot
    // table into the archive, then delayed tasks, then what autovacuum would have done.
    await db.sql(
      `INSERT INTO pgqueue.task (queue, payload) SELECT 'obs.big', jsonb_build_object('seq', g) FROM generate_series(1, $1::int) g`,
      [ROWS],
    );
    await db.sql(
      `WITH done AS (DELETE FROM pgqueue.task WHERE queue = 'obs.big' RETURNING *)
       INSERT INTO pgqueue.task_archive (id, queue, state, payload, priority, run_at, attempt, created_at, started_at, finished_at)
       SELECT id, queue, 'done', payload, priority, run_at, 1, created_at, created_at, now() FROM done`,
    );
    await db.sql(
      `INSERT INTO pgqueue.task (queue, payload, run_at)
       SELECT 'obs.big', jsonb_build_object('seq', g), now() + interval '1 day' + g * interval '1 second' FROM generate_series(1, $1::int) g`,
      [ROWS],
    );
    await qa.queue.enqueueMany([1, 2, 3].map((seq) => ({ queue: 'obs.big', payload: { seq }, options: { runAt: new Date(Date.now() - 60_000) } })));
    await db.sql('VACUUM ANALYZE pgqueue.task');
    await db.sql('VACUUM ANALYZE pgqueue.task_archive');
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });

  /**
   * The plan of a statement as a prepared statement of the library's settles on it: generic, the
   * parameters unknown to the planner (the library names its statements, see queueStatementName).
   * EXPLAIN ANALYZE executes the statement, so it runs in a transaction that is rolled back.
   */
  async function explain(sql: string, params: unknown[]): Promise<PlanNode> {
    await db.sql('BEGIN');
    try {
      await db.sql('SET LOCAL plan_cache_mode = force_generic_plan');
      await db.sql(`PREPARE measured AS ${sql}`);
      const values = params.map((p) => (p === null ? 'NULL' : `'${String(p).replace(/'/g, "''")}'`)).join(', ');
      const [row] = await db.sql<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
        `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE measured${values ? `(${values})` : ''}`,
      );
      return row['QUERY PLAN'][0].Plan;
    } finally {
      await db.sql('ROLLBACK');
      await db.sql('DEALLOCATE ALL'); // PREPARE is not transactional
    }
  }

  it('reads neither the archive nor the delayed rows', async () => {
    const text = await qa.app.get(QueueMetrics).metrics();
    // The scrape's one statement (it runs in a transaction with JIT off, see OperatorRepository).
    const statements = [{ sql: inspectStatements('pgqueue').metrics, params: [] as unknown[] }];

    for (const { sql, params } of statements) {
      const plan = await explain(sql, params);
      const scans = nodes(plan).filter((n) => n['Relation Name'] !== undefined);
      const touched = scans.map((n) => `${n['Node Type']} ${n['Relation Name']}${n['Index Name'] ? ` (${n['Index Name']})` : ''}`);
      expect(touched.filter((t) => t.includes('task_archive'))).toEqual([]);
      // queue_pause holds a row per paused queue or partition, limiter_queue one per queue that uses
      // a named limiter: not history; read whole, they stay tiny.
      expect(touched.filter((t) => t.startsWith('Seq Scan') && t !== 'Seq Scan queue_pause' && t !== 'Seq Scan limiter_queue')).toEqual([]);
      // 50 000 archived and 50 000 delayed rows; the scrape needs the 3 due ones at most.
      const rowsRead = scans.reduce((sum, n) => sum + (n['Actual Rows'] + (n['Rows Removed by Filter'] ?? 0)) * n['Actual Loops'], 0);
      expect(rowsRead).toBeLessThanOrEqual(20);
      // The top node's counts include every child's; a few index pages, not thousands of table pages.
      expect(plan['Shared Hit Blocks'] + plan['Shared Read Blocks']).toBeLessThanOrEqual(100);
    }
    expect(text).toContain('pgqueue_tasks{queue="obs.big",state="due"} 3');
    expect(sample(text, 'pgqueue_oldest_pending_seconds{queue="obs.big"}')).toBeGreaterThanOrEqual(59);
  });

  it('is never JIT-compiled: a scrape of a large table would spend hundreds of ms compiling a 6 ms statement', async () => {
    // A session where every statement costs enough for JIT (as the scrape does on large tables),
    // and pg_stat_statements to see whether a statement was compiled.
    await db.sql('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    await db.sql(`ALTER DATABASE ${db.name} SET jit_above_cost = 0`);
    const jitty = db.prisma(2);
    const other = await bootQueueApp(jitty, [], { autoStart: false }, [PgQueueMetricsModule]);
    try {
      await resetStatementStats(db);
      await other.app.get(QueueMetrics).metrics();
      const [control] = await jitty.$queryRawUnsafe<{ n: number }[]>("SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = 'obs.big'");
      const rows = await db.sql<{ query: string; jit_functions: number }>(
        `SELECT query, jit_functions::int FROM pg_stat_statements WHERE ${THIS_DATABASE} AND (query LIKE '%pending_queues%' OR query LIKE '%count(*)::int AS n FROM pgqueue.task%')`,
      );
      const scrape = rows.filter((r) => r.query.includes('pending_queues'));
      const check = rows.filter((r) => !r.query.includes('pending_queues'));
      // The control statement shows this session does compile; the scrape does not.
      expect({ scraped: scrape.length, scrapeJit: scrape.map((r) => r.jit_functions), controlJit: check.map((r) => r.jit_functions > 0), control: control.n > 0 }).toEqual({
        scraped: 1,
        scrapeJit: [0],
        controlJit: [true],
        control: true,
      });
    } finally {
      await other.close();
      await db.sql(`ALTER DATABASE ${db.name} RESET jit_above_cost`);
    }
  });

  it("reads a page for the operator's list and get, not the tables", async () => {
    const [newest] = await qa.queue.list({ limit: 1 });
    const spy = jest.spyOn(prisma, '$queryRawUnsafe');
    expect(await qa.queue.list({ limit: 100 })).toHaveLength(100);
    expect(await qa.queue.list({ queue: 'obs.big', state: 'done', limit: 100 })).toHaveLength(100);
    expect(await qa.queue.list({ queue: 'obs.big', cursor: String(BigInt(newest.id) - 1000n), limit: 100 })).toHaveLength(100);
    expect(await qa.queue.get('1')).toMatchObject({ state: 'done' });
    const statements = spy.mock.calls.map(([sql, ...params]) => ({ sql: sql as string, params }));
    spy.mockRestore();

    for (const { sql, params } of statements) {
      const scans = nodes(await explain(sql, params)).filter((n) => n['Relation Name'] !== undefined);
      // An empty table (the archive's default partition, as a rule) costs less to scan than to probe.
      expect(scans.filter((n) => n['Node Type'] === 'Seq Scan' && n['Shared Hit Blocks'] + n['Shared Read Blocks'] > 0)).toEqual([]);
      const rowsRead = scans.reduce((sum, n) => sum + (n['Actual Rows'] + (n['Rows Removed by Filter'] ?? 0)) * n['Actual Loops'], 0);
      expect(rowsRead).toBeLessThanOrEqual(201); // a page of 100 from each table at most
    }
  });

  it('caps the due count it reports, and the operator API stays exact', async () => {
    const backlog = METRICS_COUNT_CAP + 50;
    await db.sql(
      `INSERT INTO pgqueue.task (queue, payload, run_at) SELECT 'obs.backlog', '{}', now() - interval '1 minute' FROM generate_series(1, $1::int)`,
      [backlog],
    );
    const text = await qa.app.get(QueueMetrics).metrics();
    expect(text).toContain(`pgqueue_tasks{queue="obs.backlog",state="due"} ${METRICS_COUNT_CAP}`);
    const stats = await qa.queue.stats();
    expect(stats.find((s) => s.queue === 'obs.backlog')).toMatchObject({ pending: backlog });
    expect(stats.find((s) => s.queue === 'obs.big')).toMatchObject({ pending: ROWS + 3, done: ROWS });
  });
});
