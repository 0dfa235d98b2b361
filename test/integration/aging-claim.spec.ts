/**
 * Priority aging in the claim (the aging claim, claim.sql.ts): a task of priority p due at T goes before a task of
 * a more urgent priority q due after T + (p - q) * priorityAgingMs, and not before one due earlier
 * than that; the claim reads each priority level's first due tasks from task_claim_idx, never the
 * whole backlog.
 */
import { AGING_LEVELS, limitedClaims } from '../../libs/pg-queue/src/sql/claim.sql';
import { LimitsRepository, type QueueLimits } from '../../libs/pg-queue/src/sql/limits.repository';
import { genericPlan } from '../support/generic-plan';
import { schemaDatabase } from '../support/schema-database';

const byId = (ids: string[]) => [...ids].sort((a, b) => Number(a) - Number(b));
const NO_LIMITS: QueueLimits = { globalConcurrency: null, partitionConcurrency: null, rateLimit: null };

describe('priority aging in the claim', () => {
  const setup = schemaDatabase();

  /** Enqueues one task of `priority` due `agoMs` ago; returns its id. */
  async function task(queue: string, priority: number, agoMs: number): Promise<string> {
    const [{ id }] = await setup.db.sql<{ id: string }>(
      `INSERT INTO pgqueue.task (queue, payload, priority, run_at) VALUES ($1, '{}', $2, now() - $3 * interval '1 millisecond') RETURNING id::text`,
      [queue, priority, agoMs],
    );
    return id;
  }

  async function firstClaimed(queue: string, limits: QueueLimits, take = 1): Promise<string[]> {
    const prisma = setup.db.prisma(1);
    try {
      const claim = await new LimitsRepository('pgqueue').claim(prisma, queue, take, 'w', 60_000, 5, limits);
      return byId(claim.rows.map((r) => r.id));
    } finally {
      await prisma.$disconnect();
    }
  }

  it('an old task of priority 10 goes before fresh priority-0 tasks once it waited 10 intervals, not before', async () => {
    const fresh = await Promise.all([0, 1, 2].map(() => task('ag.order', 0, 100)));
    const young = await task('ag.order', 10, 9_000); // 9 intervals of 1 s: still behind
    const old = await task('ag.order', 10, 10_500); // 10.5 intervals: ahead
    // Without aging, priority decides: the priority-0 tasks first, old before young among the rest.
    expect(await firstClaimed('ag.order', NO_LIMITS, 4)).toEqual(byId([...fresh, old]));
    await setup.db.sql(`UPDATE pgqueue.task SET state = 'pending', locked_by = NULL, lease_token = NULL, locked_until = NULL, attempt = 0 WHERE queue = 'ag.order'`);
    expect(await firstClaimed('ag.order', { ...NO_LIMITS, priorityAgingMs: 1000 }, 2)).toEqual(byId([old, fresh[0]]));
    expect(await firstClaimed('ag.order', { ...NO_LIMITS, priorityAgingMs: 1000 }, 3)).toEqual(byId([fresh[1], fresh[2], young]));
  });

  // The levels it reads are the most urgent ones with pending tasks: delayed or retrying tasks may
  // fill them while the due work sits at a lower priority. That work is still claimed.
  it('claims due tasks of a priority below many levels that hold only delayed tasks', async () => {
    for (let p = 0; p < AGING_LEVELS + 2; p++) await task('ag.delayed', p, -600_000); // due in 10 minutes
    const due = await Promise.all([0, 1, 2, 3, 4].map(() => task('ag.delayed', AGING_LEVELS + 10, 1000)));
    expect(await firstClaimed('ag.delayed', { ...NO_LIMITS, priorityAgingMs: 60_000 }, 10)).toEqual(byId(due));
  });

  it('passes over a backed-off partition, as the plain claim does', async () => {
    const [{ id: off }] = await setup.db.sql<{ id: string }>(`INSERT INTO pgqueue.task (queue, payload, partition_key) VALUES ('ag.off', '{}', 'p1') RETURNING id::text`);
    const [{ id: on }] = await setup.db.sql<{ id: string }>(`INSERT INTO pgqueue.task (queue, payload, partition_key) VALUES ('ag.off', '{}', 'p2') RETURNING id::text`);
    await setup.db.sql(`INSERT INTO pgqueue.backoff (scope, name, partition_key, until, task_id) VALUES ('partition', 'ag.off', 'p1', now() + interval '1 minute', $1)`, [off]);
    expect(await firstClaimed('ag.off', { ...NO_LIMITS, priorityAgingMs: 1000 }, 10)).toEqual([on]);
  });

  it('reads the backlog through task_claim_idx, never a sequential scan, whatever the statistics', async () => {
    await setup.db.sql(`INSERT INTO pgqueue.task (queue, payload, priority, run_at)
                  SELECT 'ag.plan', '{}', g % 5, now() - (g % 1000) * interval '1 second' FROM generate_series(1, 20000) g`);
    await setup.db.sql('ANALYZE pgqueue.task');
    const plan = await genericPlan(setup.db, limitedClaims('pgqueue').aging, ['text', 'int', 'text', 'float8', 'int', 'bigint', 'int', 'text'], [`'ag.plan'`, '50', `'w'`, '60000', '5', '1000', String(AGING_LEVELS), `'0123456789abcdef'`]);
    if (process.env.SHOW_PLANS) console.log(plan);
    expect({ seqScan: /Seq Scan on task\b(?!_)/.test(plan), claimIndex: plan.includes('task_claim_idx') }).toEqual({ seqScan: false, claimIndex: true });
    // And it claims what a sort of the whole backlog by effective priority puts first.
    const expected = await setup.db.sql<{ id: string }>(
      `SELECT t.id::text FROM pgqueue.task t WHERE t.queue = 'ag.plan' ORDER BY t.priority * 1000 + extract(epoch FROM t.run_at) * 1000, t.id LIMIT 50`,
    );
    const claimed = await firstClaimed('ag.plan', { ...NO_LIMITS, priorityAgingMs: 1000 }, 50);
    expect(claimed).toEqual(byId(expected.map((r) => r.id)));
    const levels = await setup.db.sql<{ p: number }>('SELECT DISTINCT priority AS p FROM pgqueue.task WHERE id = ANY ($1::bigint[]) ORDER BY 1', [claimed]);
    expect(levels.length).toBeGreaterThan(1);
  });
});
