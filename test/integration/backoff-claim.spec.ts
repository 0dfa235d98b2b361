/**
 * Back-offs at the statement level (backoff.sql.ts): the fenced back-off statement, the plain
 * claim's filter and what it costs a queue that never backs off (a one-time probe of the tiny
 * backoff table, like the pause check), and the due time a short claim reports.
 */
import type { BackOff, NewTaskRow } from '../../libs/pg-queue/src/sql/statement-values';
import { claimSql, claimStatements } from '../../libs/pg-queue/src/sql/claim.sql';
import { LimitsRepository } from '../../libs/pg-queue/src/sql/limits.repository';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import { installSchema } from '../../libs/pg-queue/src/sql/schema.installer';
import { taskRow } from '../support/task-rows';
import { analyzedGenericPlan, planNodes, type PlanNode } from '../support/plan-nodes';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

describe('back-offs in the claim', () => {
  let db: TestDatabase;
  const repo = new TaskRepository('pgqueue', 'archive');
  const row = (queue: string, over: Partial<NewTaskRow> = {}): NewTaskRow => taskRow(queue, over);
  const dbNowMs = async () => Number((await db.sql<{ ms: number }>('SELECT (extract(epoch FROM now()) * 1000)::float8 AS ms'))[0].ms);
  const backOff = async (lease: { id: string; token: string }, scope: BackOff['scope'], ms: number): Promise<boolean> =>
    (await repo.backOff(db.prisma(), [{ ...lease, untilMs: (await dbNowMs()) + ms, scope, limiter: scope === 'limiter' ? 'lim' : null, reason: 'RateLimitedError: 429' }])).has(lease.id);

  beforeAll(async () => {
    db = await createTestDatabase();
    await installSchema(db.prisma(), 'pgqueue');
  });
  afterAll(() => db.drop());
  beforeEach(() => db.sql('TRUNCATE pgqueue.task, pgqueue.task_archive, pgqueue.backoff'));

  /** EXPLAIN ANALYZE of the plain claim as its prepared statement settles on it (generic), rolled back. */
  const claimPlan = (queue: string): Promise<PlanNode> =>
    analyzedGenericPlan(db, claimSql(claimStatements('pgqueue'), 10), [`'${queue}'`, '10', `'w'`, '60000', '5', `'0123456789abcdef'`]);
  const backoffProbes = (plan: PlanNode) => planNodes(plan).filter((n) => n['Relation Name'] === 'backoff').map((n) => n['Actual Loops']);

  it('a release or back-off of a task whose cancel was requested while it ran ends it cancelled, and says so', async () => {
    const ids = await repo.insert(db.prisma(), [row('bc.cancel'), row('bc.cancel'), row('bc.cancel')]);
    const claimed = new Map((await repo.claim(db.prisma(), 'bc.cancel', 3, 'w', 60_000, 5)).rows.map((r) => [r.id, { id: r.id, token: r.lease_token }]));
    const leases = ids.map((id) => claimed.get(id)!);
    await db.sql('INSERT INTO pgqueue.task_cancel (task_id) VALUES ($1), ($2)', [ids[0], ids[1]]);
    const released = await repo.release(db.prisma(), [leases[0], leases[2]]);
    expect({ released: [...released].sort(), cancelled: [...released.cancelled] }).toEqual({ released: [ids[0], ids[2]].sort(), cancelled: [ids[0]] });
    const until = (await dbNowMs()) + 60_000;
    const backedOff = await repo.backOff(db.prisma(), [{ ...leases[1], untilMs: until, scope: 'task', limiter: null, reason: '429' }]);
    expect({ released: [...backedOff], cancelled: [...backedOff.cancelled] }).toEqual({ released: [ids[1]], cancelled: [ids[1]] });
    const states = await db.sql<{ id: string; state: string }>('SELECT id::text, state FROM pgqueue.task WHERE queue = $1 ORDER BY id', ['bc.cancel']);
    expect(states.map((t) => t.state)).toEqual(['cancelled', 'cancelled', 'pending']);
  });

  // The downstream's 429 holds for the queue whatever became of the task that heard it.
  it('a back-off of the whole queue from a task whose cancel was requested still backs the queue off, until its end', async () => {
    const [id] = await repo.insert(db.prisma(), [row('bc.cancelq')]);
    const [claimed] = (await repo.claim(db.prisma(), 'bc.cancelq', 1, 'w', 60_000, 5)).rows;
    await db.sql('INSERT INTO pgqueue.task_cancel (task_id) VALUES ($1)', [id]);
    const until = (await dbNowMs()) + 60_000;
    const given = await repo.backOff(db.prisma(), [{ id, token: claimed.lease_token, untilMs: until, scope: 'queue', limiter: null, reason: '429' }]);
    expect([...given.cancelled]).toEqual([id]);
    const [b] = await db.sql<{ scope: string; name: string; until_ms: number }>("SELECT scope, name, (extract(epoch FROM until) * 1000)::float8 AS until_ms FROM pgqueue.backoff WHERE name = 'bc.cancelq'");
    expect({ scope: b?.scope, name: b?.name, end: Math.abs((b?.until_ms ?? 0) - until) < 5 }).toEqual({ scope: 'queue', name: 'bc.cancelq', end: true });
  });

  it('a queue that never backs off pays one probe of the backoff table per claim, however many rows it claims', async () => {
    await repo.insert(db.prisma(), Array.from({ length: 50 }, (_, i) => row('bc.plain', { partitionKey: `p${i % 5}` })));
    // Another queue's back-offs are in the table: they do not make this queue's rows pay.
    const [other] = await repo.insert(db.prisma(), [row('bc.other')]);
    const [lease] = (await repo.claim(db.prisma(), 'bc.other', 1, 'w', 60_000, 5)).rows;
    expect(await backOff({ id: other, token: lease.lease_token }, 'partition', 60_000)).toBe(true);
    const plan = await claimPlan('bc.plain');
    // A full claim (10 of 50 due): the gate runs once; the queue-wide and per-partition probes
    // never run, nor does the result's (when the next back-off ends: only for a short claim).
    const loops = backoffProbes(plan);
    expect(loops.filter((n) => n > 0)).toEqual([1]);
  });

  it("a partition's back-off: its rows are passed over, per row only while the queue has one; a short claim reports when it ends", async () => {
    await repo.insert(db.prisma(), [row('bc.part', { partitionKey: 'a' }), row('bc.part', { partitionKey: 'a' })]);
    const [first] = (await repo.claim(db.prisma(), 'bc.part', 1, 'w', 60_000, 5)).rows;
    expect(await backOff({ id: first.id, token: first.lease_token }, 'partition', 5_000)).toBe(true);
    const others = await repo.insert(db.prisma(), [row('bc.part', { partitionKey: 'b' }), row('bc.part')]);
    const claim = await repo.claim(db.prisma(), 'bc.part', 10, 'w', 60_000, 5);
    // b and the task without a partition; none of a (its other task is due but backed off).
    expect(claim.rows.map((r) => r.id).sort()).toEqual([...others].sort());
    expect(claim.nextDueInMs).toBeGreaterThan(3_000);
    expect(claim.nextDueInMs).toBeLessThanOrEqual(5_000);
    // The backed-off task: pending again, its attempt not counted, no error recorded.
    expect(await db.sql('SELECT state, attempt, last_error, log FROM pgqueue.task WHERE id = $1', [first.id])).toEqual([{ state: 'pending', attempt: 0, last_error: null, log: null }]);
    expect(await db.sql("SELECT scope, name, partition_key, reason FROM pgqueue.backoff")).toEqual([{ scope: 'partition', name: 'bc.part', partition_key: 'a', reason: 'RateLimitedError: 429' }]);
  });

  it("scope 'queue' stops every claim of the queue; 'task' only delays the task; a lost lease sets nothing", async () => {
    const ids = await repo.insert(db.prisma(), [row('bc.q'), row('bc.q'), row('bc.t'), row('bc.t')]);
    const [q1] = (await repo.claim(db.prisma(), 'bc.q', 1, 'w', 60_000, 5)).rows;
    expect(await backOff({ id: q1.id, token: q1.lease_token }, 'queue', 5_000)).toBe(true);
    const blocked = await repo.claim(db.prisma(), 'bc.q', 10, 'w', 60_000, 5);
    expect(blocked.rows).toEqual([]);
    expect(blocked.nextDueInMs).toBeGreaterThan(3_000);

    const [t1] = (await repo.claim(db.prisma(), 'bc.t', 1, 'w', 60_000, 5)).rows;
    expect(await backOff({ id: t1.id, token: t1.lease_token }, 'task', 5_000)).toBe(true);
    expect((await repo.claim(db.prisma(), 'bc.t', 10, 'w', 60_000, 5)).rows.map((r) => r.id)).toEqual([ids[3]]);
    expect(await db.sql("SELECT 1 FROM pgqueue.backoff WHERE name = 'bc.t'")).toEqual([]);

    // A stale lease (a second claim of the task took it over): nothing changes.
    await db.sql("UPDATE pgqueue.task SET run_at = now() - interval '1 s' WHERE id = $1", [t1.id]);
    const [again] = (await repo.claim(db.prisma(), 'bc.t', 1, 'w2', 60_000, 5)).rows;
    expect(again.id).toBe(t1.id);
    expect(await backOff({ id: t1.id, token: t1.lease_token }, 'limiter', 5_000)).toBe(false);
    expect(await db.sql("SELECT 1 FROM pgqueue.backoff WHERE scope = 'limiter'")).toEqual([]);
    expect(await db.sql('SELECT state, locked_by FROM pgqueue.task WHERE id = $1', [t1.id])).toEqual([{ state: 'running', locked_by: 'w2' }]);
  });

  it('one statement for a batch: each lease gets its own end, scope, limiter and reason; a stale one sets nothing', async () => {
    const ids = await repo.insert(db.prisma(), ['a', 'b', null, null, null].map((p) => row('bc.mix', p ? { partitionKey: p } : {})));
    const leases = (await repo.claim(db.prisma(), 'bc.mix', 5, 'w', 60_000, 5)).rows;
    const byId = new Map(leases.map((l) => [l.id, l]));
    const [pa, pb, tq, tl, stale] = ids.map((id) => ({ id, token: byId.get(id)!.lease_token }));
    // The last lease is taken over (as after an expiry and a new claim).
    await db.sql('UPDATE pgqueue.task SET lease_token = gen_random_uuid() WHERE id = $1', [stale.id]);
    const now = await dbNowMs();
    const asked: [typeof pa, BackOff['scope'], number, string | null][] = [
      [pa, 'partition', 5_000, null], [pb, 'task', 6_000, null], [tq, 'queue', 7_000, null], [tl, 'limiter', 8_000, 'lim, "quoted"'], [stale, 'queue', 9_000, null],
    ];
    const backOffs: BackOff[] = asked.map(([l, scope, ms, limiter], i) => ({ ...l, untilMs: now + ms, scope, limiter, reason: `429 #${i}, {"json": true}` }));
    const released = await repo.backOff(db.prisma(), backOffs);
    expect([...released].sort()).toEqual([pa.id, pb.id, tq.id, tl.id].sort());
    const rows = await db.sql<{ scope: string; name: string; partition_key: string; reason: string; in_ms: number }>(
      "SELECT scope, name, partition_key, reason, round(extract(epoch FROM until - now()) * 1000 / 1000)::int * 1000 AS in_ms FROM pgqueue.backoff ORDER BY until",
    );
    expect(rows).toEqual([
      { scope: 'partition', name: 'bc.mix', partition_key: 'a', reason: '429 #0, {"json": true}', in_ms: 5_000 },
      { scope: 'queue', name: 'bc.mix', partition_key: '', reason: '429 #2, {"json": true}', in_ms: 7_000 },
      { scope: 'limiter', name: 'lim, "quoted"', partition_key: '', reason: '429 #3, {"json": true}', in_ms: 8_000 },
    ]);
    // Each given-back task is due at its own end, uncounted; the stale lease's task is untouched.
    const tasks = await db.sql<{ id: string; state: string; attempt: number; in_ms: number }>(
      'SELECT id::text, state, attempt, round(extract(epoch FROM run_at - now()))::int * 1000 AS in_ms FROM pgqueue.task WHERE id = ANY($1::bigint[]) ORDER BY id',
      [ids],
    );
    expect(tasks).toEqual([
      { id: pa.id, state: 'pending', attempt: 0, in_ms: 5_000 },
      { id: pb.id, state: 'pending', attempt: 0, in_ms: 6_000 },
      { id: tq.id, state: 'pending', attempt: 0, in_ms: 7_000 },
      { id: tl.id, state: 'pending', attempt: 0, in_ms: 8_000 },
      { id: stale.id, state: 'running', attempt: 1, in_ms: expect.any(Number) },
    ].sort((x, y) => Number(x.id) - Number(y.id)));
  });

  it('limited claims: a partitioned claim gives a backed-off partition no room; a queue backed off claims nothing and says until when', async () => {
    const limits = new LimitsRepository('pgqueue');
    const rules = { globalConcurrency: null, partitionConcurrency: 5, rateLimit: null };
    await repo.insert(db.prisma(), ['a', 'a', 'a', 'b', 'b'].map((p) => row('bc.fair', { partitionKey: p })));
    const [first] = (await repo.claim(db.prisma(), 'bc.fair', 1, 'w', 60_000, 5)).rows;
    expect(await backOff({ id: first.id, token: first.lease_token }, 'partition', 5_000)).toBe(true);
    const claim = await limits.claim(db.prisma(), 'bc.fair', 10, 'w', 60_000, 5, rules);
    expect(claim.rows.map((r) => r.partition_key)).toEqual(['b', 'b']);

    const [q] = (await limits.claim(db.prisma(), 'bc.fair', 1, 'w', 60_000, 5, { ...rules, partitionConcurrency: null, globalConcurrency: 10 })).rows ?? [];
    expect(q).toBeUndefined(); // only a's tasks are left, and a is backed off
    await repo.insert(db.prisma(), [row('bc.lim'), row('bc.lim')]);
    const [l1] = (await repo.claim(db.prisma(), 'bc.lim', 1, 'w', 60_000, 5)).rows;
    expect(await backOff({ id: l1.id, token: l1.lease_token }, 'queue', 5_000)).toBe(true);
    const held = await limits.claim(db.prisma(), 'bc.lim', 10, 'w', 60_000, 5, { ...rules, partitionConcurrency: 3 });
    expect(held.rows).toEqual([]);
    expect(held.nextDueInMs).toBeGreaterThan(3_000);
  });
});
