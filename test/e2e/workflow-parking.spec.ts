/**
 * Parked workflows (issue 24, proofs), three app instances:
 * - 10 000 workflows parked on an hour's sleep (1 000 enqueued and parked by the instances
 *   themselves, 9 000 copies of their rows: task row and journal) leave an idle claim of their
 *   queue as cheap as with none: the claim statement's buffers (EXPLAIN ANALYZE BUFFERS, as its
 *   prepared generic plan) are compared, not wall time.
 * - Sleeps wake on time without the 30 s poll: 20 workflows sleeping 300-1500 ms resume well
 *   within 2 s of their journaled end (from the sleep's `until` to the start of the step after it,
 *   both by the database's clock).
 */
import { Injectable } from '@nestjs/common';
import { Workflow, type WorkflowContext } from '@app/pg-queue';
import { claimSql, claimStatements } from '@app/pg-queue/sql/claim.sql';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

@Injectable()
class Sleepers {
  @Workflow('park.hour')
  async hour(_input: unknown, wf: WorkflowContext) {
    await wf.sleep(3_600_000);
  }

  @Workflow('park.short')
  async short(input: { ms: number }, wf: WorkflowContext) {
    await wf.sleep(input.ms);
    await wf.step('woke', () => 1);
  }
}

type PlanNode = { 'Shared Hit Blocks': number; 'Shared Read Blocks': number; Plans?: PlanNode[] };

const PARKED = 10_000;
/** Parked by the app instances; the rest are copies of their rows. */
const REAL = 1000;

describe('parked workflows', () => {
  let db: TestDatabase;
  const apps: QueueApp[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    for (let i = 0; i < 3; i++) apps.push(await bootQueueApp(db.prisma(12), [Sleepers], { workerId: `park-${i}`, databaseUrl: db.url }));
  }, 60_000);

  afterAll(async () => {
    for (const a of apps) await a.close();
    await db.drop();
  });

  /** Buffers the claim of `queue` touches when it finds nothing, as its generic plan runs it (rolled back). */
  async function idleClaimBuffers(queue: string): Promise<number> {
    await db.sql('BEGIN');
    try {
      await db.sql('SET LOCAL plan_cache_mode = force_generic_plan');
      await db.sql(`PREPARE idle_claim (text, int, text, int, int, text) AS ${claimSql(claimStatements('pgqueue'), 10)}`);
      const [row] = await db.sql<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
        `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE idle_claim('${queue}', 10, 'probe', 30000, 5, '0123456789abcdef')`,
      );
      const plan = row['QUERY PLAN'][0].Plan;
      return plan['Shared Hit Blocks'] + plan['Shared Read Blocks'];
    } finally {
      await db.sql('ROLLBACK');
      await db.sql('DEALLOCATE ALL');
    }
  }

  it(`an idle claim with ${PARKED} parked workflows is as cheap as with none`, async () => {
    // A queue with one parked workflow (the queue exists, its claim has nothing to take).
    const [first] = await apps[0].queue.enqueueMany([{ queue: 'park.hour', payload: {} }]);
    await waitFor('one workflow parked', async () => (await apps[0].queue.get(first))?.state === 'waiting');
    await db.sql('VACUUM ANALYZE pgqueue.task');
    await idleClaimBuffers('park.hour');
    const before = await idleClaimBuffers('park.hour');

    // REAL of them parked by the instances themselves; the rest copies of those rows (task row and
    // journal as a park leaves them): parking 10 000 for real takes about a minute on 2 cores.
    const t0 = Date.now();
    await apps[0].queue.enqueueMany(Array.from({ length: REAL - 1 }, () => ({ queue: 'park.hour', payload: {} })));
    const parked = "SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = 'park.hour' AND state = 'waiting' AND waiting_for = 'sleep'";
    await waitFor(`${REAL} workflows parked`, async () => (await db.sql<{ n: number }>(parked))[0].n === REAL, { timeoutMs: 60_000, everyMs: 250 });
    const parkMs = Date.now() - t0;
    const columns = (await db.sql<{ c: string }>(
      "SELECT quote_ident(column_name) AS c FROM information_schema.columns WHERE table_schema = 'pgqueue' AND table_name = 'task' AND column_name <> 'id' AND is_generated = 'NEVER'",
    )).map((r) => r.c).join(', ');
    await db.sql(
      `WITH copies AS (
         INSERT INTO pgqueue.task (${columns})
         SELECT ${columns} FROM pgqueue.task t, generate_series(1, $2::int) g WHERE t.id = $1::bigint
         RETURNING id
       )
       INSERT INTO pgqueue.workflow_step (task_id, seq, kind, name, outcome, result, attempt, started_at, finished_at)
       SELECT c.id, w.seq, w.kind, w.name, w.outcome, w.result, w.attempt, w.started_at, w.finished_at
       FROM copies c, pgqueue.workflow_step w WHERE w.task_id = $1::bigint`,
      [first, PARKED - REAL],
    );
    expect((await db.sql<{ n: number }>(parked))[0].n).toBe(PARKED);
    // Right after (the claim index may still hold entries of rows that went through it), then as
    // autovacuum leaves it.
    const fresh = [await idleClaimBuffers('park.hour'), await idleClaimBuffers('park.hour')];
    await db.sql('VACUUM ANALYZE pgqueue.task');
    const after = await idleClaimBuffers('park.hour');
    console.log(`idle claim of a queue with 1 parked workflow: ${before} buffers; with ${PARKED} (${REAL} parked by the apps in ${(parkMs / 1000).toFixed(1)} s): ` +
      `${fresh.join(', ')} buffers before vacuum, ${after} after`);
    expect(after).toBeLessThanOrEqual(before + 2);
    expect(fresh[1]).toBeLessThanOrEqual(before + 20);
  }, 240_000);

  it('20 sleeps of 300-1500 ms across 3 instances resume within 2 s of their time', async () => {
    const sleeps = Array.from({ length: 20 }, (_, i) => 300 + Math.round((1200 * i) / 19));
    const ids = await Promise.all(sleeps.map((ms, i) => apps[i % 3].queue.enqueue('park.short', { ms })));
    await waitFor('every sleeper done', async () => (await Promise.all(ids.map((id) => apps[0].queue.get(id)))).every((t) => t?.state === 'done'), { timeoutMs: 30_000 });
    const rows = await db.sql<{ delay_ms: number }>(
      `SELECT (extract(epoch FROM w.started_at - (s.result ->> 'until')::timestamptz) * 1000)::float8 AS delay_ms
       FROM pgqueue.workflow_step s JOIN pgqueue.workflow_step w ON w.task_id = s.task_id AND w.seq = 1
       WHERE s.task_id = ANY ($1::bigint[]) AND s.seq = 0 AND s.kind = 'sleep'`,
      [ids],
    );
    const delays = rows.map((r) => r.delay_ms).sort((a, b) => a - b);
    const at = (q: number) => delays[Math.min(delays.length - 1, Math.floor(q * delays.length))];
    console.log(`wake delays (ms, from the sleep's end to the next step's start): median ${at(0.5).toFixed(0)}, p95 ${at(0.95).toFixed(0)}, max ${delays[delays.length - 1].toFixed(0)}, min ${delays[0].toFixed(0)}`);
    expect(delays).toHaveLength(20);
    expect(delays[0]).toBeGreaterThanOrEqual(0); // never early
    expect(delays[delays.length - 1]).toBeLessThan(2000);
  }, 60_000);
});
