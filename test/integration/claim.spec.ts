import type { NewTaskRow } from '../../libs/pg-queue/src/sql/statement-values';
import { CLAIM_MAX } from '../../libs/pg-queue/src/core/task-rules';
import { claimSql, claimStatements, newClaimId } from '../../libs/pg-queue/src/sql/claim.sql';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import { installSchema } from '../../libs/pg-queue/src/sql/schema.installer';
import { schemaMigrations } from '../../libs/pg-queue/src/sql/schema.sql';
import { analyzedGenericPlan, planNodes } from '../support/plan-nodes';
import { taskRow } from '../support/task-rows';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

const row = (n: number, over: Partial<NewTaskRow> = {}): NewTaskRow => taskRow('claim.q', { payloadJson: JSON.stringify({ n }), ...over });

describe('claim statement', () => {
  let db: TestDatabase;
  const repo = new TaskRepository('pgqueue', 'archive');

  beforeAll(async () => {
    db = await createTestDatabase();
    await installSchema(db.prisma(), 'pgqueue');
  });
  afterAll(() => db.drop());
  beforeEach(() => db.sql('TRUNCATE pgqueue.task, pgqueue.task_archive'));

  it('two workers on separate Prisma clients never claim the same task', async () => {
    const total = 3000;
    const ids = await repo.insert(db.prisma(), Array.from({ length: total }, (_, i) => row(i)));
    const clients = [db.prisma(8), db.prisma(8)];
    const claimedBy = new Map<string, string[]>();
    // 2 clients x 4 concurrent claim loops each, batches of 7.
    await Promise.all(
      clients.flatMap((client, c) =>
        Array.from({ length: 4 }, async (_, l) => {
          const worker = `w${c}.${l}`;
          for (;;) {
            const rows = (await repo.claim(client, 'claim.q', 7, worker, 60_000, 5)).rows;
            if (rows.length === 0) return;
            for (const r of rows) claimedBy.set(r.id, [...(claimedBy.get(r.id) ?? []), worker]);
          }
        }),
      ),
    );
    const duplicates = [...claimedBy].filter(([, by]) => by.length > 1);
    expect(duplicates).toEqual([]);
    expect(claimedBy.size).toBe(total);
    expect(new Set(claimedBy.keys())).toEqual(new Set(ids));
    const [{ attempts }] = await db.sql("SELECT array_agg(DISTINCT attempt) AS attempts FROM pgqueue.task WHERE state = 'running'");
    expect(attempts).toEqual([1]);
    // both clients got work
    const byClient = new Set([...claimedBy.values()].map(([w]) => w.split('.')[0]));
    expect(byClient).toEqual(new Set(['w0', 'w1']));
  });

  it('claims in priority, then run_at, then id order, and never a task that is not due', async () => {
    const past = new Date(Date.now() - 60_000);
    await repo.insert(db.prisma(), [
      row(1, { priority: 5 }),
      row(2, { priority: 1 }),
      row(3, { priority: 1, runAt: past }),
      row(4, { priority: 0, delayMs: 60_000 }),
      row(5, { priority: 1 }),
    ]);
    const rows = (await repo.claim(db.prisma(), 'claim.q', 10, 'w', 1000, 5)).rows;
    const order = rows
      .sort((a, b) => a.priority - b.priority || a.run_at_ms - b.run_at_ms || Number(a.id) - Number(b.id))
      .map((r) => (r.payload as { n: number }).n);
    expect(order).toEqual([3, 2, 5, 1]);
  });

  it('counts the attempt and takes a lease at claim time', async () => {
    const [id] = await repo.insert(db.prisma(), [row(1)]);
    const [claimed] = (await repo.claim(db.prisma(), 'claim.q', 1, 'host:1:abc', 30_000, 5)).rows;
    expect(claimed).toMatchObject({ id, attempt: 1 });
    const [t] = await db.sql('SELECT state, locked_by, lease_token::text, extract(epoch FROM locked_until - now()) AS left_s FROM pgqueue.task WHERE id = $1', [id]);
    expect(t).toMatchObject({ state: 'running', locked_by: 'host:1:abc', lease_token: claimed.lease_token });
    expect(Number(t.left_s)).toBeGreaterThan(25);
  });

  it('returns each claimed row with every field as stored (the plain claim sends rows as arrays)', async () => {
    const [parent] = await repo.insert(db.prisma(), [row(0)]);
    const runAt = new Date(Date.now() - 5_000);
    const [id] = await repo.insert(db.prisma(), [
      row(1, { priority: 3, runAt, maxAttempts: 7, parentId: parent, dedupKey: 'd-1', groupKey: 'g-1', traceContext: JSON.stringify({ traceparent: '00-abc-def-01' }) }),
    ]);
    const [plain] = await repo.insert(db.prisma(), [row(2, { priority: 4 })]);
    const { rows } = await repo.claim(db.prisma(), 'claim.q', 10, 'w', 30_000, 5);
    const [stored] = await db.sql(
      `SELECT (extract(epoch FROM run_at) * 1000)::float8 AS run_at_ms, (extract(epoch FROM created_at) * 1000)::float8 AS created_at_ms, lease_token::text
       FROM pgqueue.task WHERE id = $1`,
      [id],
    );
    const claimed = rows.find((r) => r.id === id);
    expect(claimed).toEqual({
      id,
      queue: 'claim.q',
      payload: { n: 1 },
      priority: 3,
      // Epoch ms to the microsecond: the claim computes them in float8, this query in numeric.
      run_at_ms: expect.closeTo(stored.run_at_ms, 3),
      attempt: 1,
      max_attempts: 7,
      created_at_ms: expect.closeTo(stored.created_at_ms, 3),
      lease_token: stored.lease_token,
      parent_id: parent,
      group_key: 'g-1',
      dedup_key: 'd-1',
      trace_context: { traceparent: '00-abc-def-01' },
    });
    expect(claimed!.run_at_ms).toBe(runAt.getTime());
    // A task that set no limit takes the claiming handler's (5), and its optional fields are null.
    expect(rows.find((r) => r.id === plain)).toMatchObject({ priority: 4, max_attempts: 5, parent_id: null, group_key: null, dedup_key: null, trace_context: null });
  });

  it('reads due times to the millisecond, also those whose float8 seconds times 1000 fall just below it', async () => {
    // Due times where date_part('epoch') * 1000 gives ….9998 (2004; about 3 % of the milliseconds of 2001-2042).
    const dues = [1073762039718, 1073775039725, 1073788039732, 1073801039739, 1073866039774];
    await repo.insert(db.prisma(), dues.map((ms, i) => row(i, { runAt: new Date(ms) })));
    const { rows } = await repo.claim(db.prisma(), 'claim.q', 10, 'w', 30_000, 5);
    expect(rows.map((r) => r.run_at_ms).sort()).toEqual(dues);
  });

  it('walks task_claim_idx in order on its generic plans beside many small queues and a large one', async () => {
    await db.sql(`INSERT INTO pgqueue.task (queue, payload) SELECT 'small.' || (g % 2000), '{}' FROM generate_series(1, 4000) g`);
    await db.sql(`INSERT INTO pgqueue.task (queue, payload) SELECT 'claim.big', '{}' FROM generate_series(1, 30000)`);
    await db.sql('ANALYZE pgqueue.task');
    for (const take of [1, 50, 500]) {
      const plan = planNodes(await analyzedGenericPlan(db, claimSql(claimStatements('pgqueue'), take), [`'claim.big'`, String(take), `'w'`, '60000', '5', `'0123456789abcdef'`]));
      const taskReads = plan.filter((n) => n['Relation Name'] === 'task' && n['Alias'] === 't');
      expect([take, taskReads.map((n) => [n['Node Type'], n['Index Name'], n['Actual Rows']])]).toEqual([take, [['Index Scan', 'task_claim_idx', take]]]);
      expect(plan.filter((n) => n['Node Type'] === 'Sort')).toEqual([]);
    }
  });

  it('is planned once per connection, whatever the claim takes: its prepared statement settles on the generic plan', async () => {
    await repo.insert(db.prisma(), Array.from({ length: 3000 }, (_, i) => row(i)));
    await db.sql('ANALYZE pgqueue.task');
    const statements = claimStatements('pgqueue');
    const plans: Record<number, { generic: number; custom: number }> = {};
    for (const take of [1, 10, 50, 100, 500, 1000]) {
      await db.sql(`PREPARE claim_probe (text, int, text, bigint, int, text) AS ${claimSql(statements, take)}`);
      try {
        // Rolled back: every execution finds the same backlog.
        for (let i = 0; i < 8; i++) {
          await db.sql('BEGIN');
          await db.sql(`EXECUTE claim_probe ('claim.q', ${take}, 'w', 60000, 5, '${newClaimId()}')`);
          await db.sql('ROLLBACK');
        }
        [plans[take]] = await db.sql(`SELECT generic_plans::int AS generic, custom_plans::int AS custom FROM pg_prepared_statements WHERE name = 'claim_probe'`);
      } finally {
        await db.sql('DEALLOCATE claim_probe');
      }
    }
    // The plan cache tries five custom plans, then keeps the generic one if it costs no more.
    for (const take of Object.keys(plans)) expect([take, plans[Number(take)]]).toEqual([take, { generic: 3, custom: 5 }]);
  });

  it('locks only the rows it takes, not the ceiling it picks them under (generic plan, EXPLAIN ANALYZE)', async () => {
    await repo.insert(db.prisma(), Array.from({ length: 300 }, (_, i) => row(i)));
    const plan = await analyzedGenericPlan(db, claimSql(claimStatements('pgqueue'), 3), [`'claim.q'`, '3', `'w'`, '60000', '5', `'0123456789abcdef'`]);
    const locking = planNodes(plan).filter((n) => n['Node Type'] === 'LockRows');
    expect(locking.map((n) => n['Actual Rows'])).toEqual([3]);
  });

  it('refuses a claim larger than a claim may be', () => {
    expect(() => claimSql(claimStatements('pgqueue'), CLAIM_MAX + 1)).toThrow(`a claim takes at most ${CLAIM_MAX} tasks, asked for ${CLAIM_MAX + 1}`);
  });

  it('installs the schema once however many instances start at the same moment', async () => {
    const fresh = await createTestDatabase();
    try {
      const results = await Promise.all(Array.from({ length: 5 }, () => installSchema(fresh.prisma(2), 'pgqueue_race')));
      // They take turns step by step: every version is completed by exactly one of them.
      expect(results.flat().sort((x, y) => x - y)).toEqual(schemaMigrations('pgqueue_race').map((m) => m.version));
      expect(await fresh.sql("SELECT version FROM pgqueue_race.schema_version ORDER BY 1")).toEqual(schemaMigrations('pgqueue_race').map((m) => ({ version: m.version })));
    } finally {
      await fresh.drop();
    }
  });
});
