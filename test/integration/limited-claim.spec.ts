/**
 * The flow-controlled claims (limits.sql.ts) against a real backlog: planned from row estimates,
 * their cost passes Postgres' jit_above_cost on a queue of some thousands of tasks, and compiling
 * took ~80 ms of a ~4 ms claim (bench scenario 9: 286 partitioned claims' tasks per second).
 * Their rate windows (rate-window.sql.ts): a few numbers per queue or partition, exact (never more
 * than `max` claims in any window), a freed slot seen at most one step (perMs / RATE_STEPS) late;
 * the arithmetic checked with the clock given, against a log of every claim, and the claims made
 * from several clients at once, each with its own pool, as instances would.
 */
import { Client } from 'pg';
import { BLOCKED_ROUND_RECHECK_MS, LIMITED_CLAIM_RELEASE } from '../../libs/pg-queue/src/sql/limited-claim.function';
import { LimitsRepository } from '../../libs/pg-queue/src/sql/limits.repository';
import { LIMIT_LOCK_NAMESPACE } from '../../libs/pg-queue/src/sql/limits.sql';
import { limitedClaims } from '../../libs/pg-queue/src/sql/claim.sql';
import { RATE_STEPS, windowAdd, windowCount, windowFreesInMs } from '../../libs/pg-queue/src/sql/rate-window.sql';
import { installSchema } from '../../libs/pg-queue/src/sql/schema.installer';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import { deferred } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { resetStatementStats, THIS_DATABASE } from '../support/statement-stats';

describe('limited claims', () => {
  let db: TestDatabase;

  beforeAll(async () => {
    db = await createTestDatabase();
    await installSchema(db.prisma(), 'pgqueue');
  });
  afterAll(async () => {
    await db.drop();
  });

  it('are one statement each, one round trip, whatever the rules (claim_limited), and still keep to them', async () => {
    const prisma = db.prisma(2);
    const calls: string[] = [];
    const counted = new Proxy(prisma, {
      get(t, p) {
        const v = Reflect.get(t, p, t) as unknown;
        if (typeof v !== 'function') return v;
        return (...args: unknown[]) => {
          if (typeof p === 'string' && p.startsWith('$') && p !== '$disconnect') calls.push(p);
          return (v as (...a: unknown[]) => unknown).apply(t, args);
        };
      },
    });
    try {
      const repo = new LimitsRepository('pgqueue', { limiters: new Map([['rc.shared', { name: 'rc.shared', concurrency: 3, rateLimit: { max: 100, perMs: 1000 } }]]) });
      const rules = {
        global: { globalConcurrency: 2, partitionConcurrency: null, rateLimit: null },
        rate: { globalConcurrency: null, partitionConcurrency: null, rateLimit: { max: 3, perMs: 60_000 } },
        partitions: { globalConcurrency: null, partitionConcurrency: 1, rateLimit: null },
        aging: { globalConcurrency: 4, partitionConcurrency: null, rateLimit: null, priorityAgingMs: 1000 },
        limiter: { globalConcurrency: null, partitionConcurrency: null, rateLimit: null, limiter: 'rc.shared' },
      };
      const taken: Record<string, number> = {};
      const statements: Record<string, string[]> = {};
      for (const [name, limits] of Object.entries(rules)) {
        await db.sql(`INSERT INTO pgqueue.task (queue, payload, partition_key) SELECT $1, '{}', 'p' || (g % 2) FROM generate_series(1, 10) g`, [`rc.${name}`]);
        calls.length = 0;
        const claim = await repo.claim(counted, `rc.${name}`, 10, 'w', 60_000, 5, limits);
        statements[name] = [...calls];
        taken[name] = claim.rows.length;
      }
      expect(taken).toEqual({ global: 2, rate: 3, partitions: 2, aging: 4, limiter: 3 });
      expect(statements).toEqual(Object.fromEntries(Object.keys(rules).map((name) => [name, ['$queryRawUnsafe']])));
    } finally {
      await prisma.$disconnect();
    }
  });

  it("under globalConcurrency count as free the running tasks the caller says ended (their endings not yet written), and only those", async () => {
    const prisma = db.prisma(2);
    try {
      const repo = new LimitsRepository('pgqueue');
      const limits = { globalConcurrency: 2, partitionConcurrency: null, rateLimit: null };
      await db.sql(`INSERT INTO pgqueue.task (queue, payload) SELECT 'rc.ending', '{}' FROM generate_series(1, 10)`);
      await db.sql(`INSERT INTO pgqueue.task (queue, payload) SELECT 'rc.other', '{}' FROM generate_series(1, 2)`);
      const first = await repo.claim(prisma, 'rc.ending', 10, 'w', 60_000, 5, limits);
      const elsewhere = await new TaskRepository('pgqueue', 'archive').claim(prisma, 'rc.other', 2, 'w', 60_000, 5);
      const tokens = (c: { rows: { lease_token: string }[] }) => c.rows.map((r) => r.lease_token);
      const sizes = {
        first: first.rows.length,
        full: (await repo.claim(prisma, 'rc.ending', 10, 'w', 60_000, 5, limits)).rows.length,
        // tokens of another queue's running tasks and a made-up one free nothing here
        strangers: (await repo.claim(prisma, 'rc.ending', 10, 'w', 60_000, 5, limits, undefined, [...tokens(elsewhere), '00000000-0000-0000-0000-000000000001'])).rows.length,
        oneEnding: (await repo.claim(prisma, 'rc.ending', 10, 'w', 60_000, 5, limits, undefined, tokens(first).slice(0, 1))).rows.length,
      };
      expect(sizes).toEqual({ first: 2, full: 0, strangers: 0, oneEnding: 1 });
      // The rows still say running until their endings are written: three, for a limit of two.
      expect((await db.sql("SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = 'rc.ending' AND state = 'running'"))[0].n).toBe(3);
    } finally {
      await prisma.$disconnect();
    }
  });

  it('under partitionConcurrency count as free, in their partitions, the running tasks the caller says ended, and only those', async () => {
    const prisma = db.prisma(2);
    try {
      const repo = new LimitsRepository('pgqueue');
      const limits = { globalConcurrency: null, partitionConcurrency: 1, rateLimit: null };
      await db.sql(`INSERT INTO pgqueue.task (queue, payload, partition_key) SELECT 'rc.pending', '{}', 'p' || (g % 2) FROM generate_series(1, 10) g`);
      const first = await repo.claim(prisma, 'rc.pending', 10, 'w', 60_000, 5, limits);
      const token = (p: string) => first.rows.filter((r) => r.partition_key === p).map((r) => r.lease_token);
      const claimed = (c: { rows: { partition_key?: string | null }[] }) => c.rows.map((r) => r.partition_key).sort();
      const sizes = {
        first: claimed(first),
        full: claimed(await repo.claim(prisma, 'rc.pending', 10, 'w', 60_000, 5, limits)),
        stranger: claimed(await repo.claim(prisma, 'rc.pending', 10, 'w', 60_000, 5, limits, undefined, ['00000000-0000-0000-0000-000000000001'])),
        // p1's task ended at the caller: p1 has room again, p0 not.
        p1Ending: claimed(await repo.claim(prisma, 'rc.pending', 10, 'w', 60_000, 5, limits, undefined, token('p1'))),
      };
      // Before release 6: p1Ending took nothing (the ended task still counted in its partition).
      expect(sizes).toEqual({ first: ['p0', 'p1'], full: [], stranger: [], p1Ending: ['p1'] });
    } finally {
      await prisma.$disconnect();
    }
  });

  it('say what to run when the database has no claim_limited (a schema installed by hand from an older release)', async () => {
    const prisma = db.prisma(1);
    try {
      await installSchema(prisma, 'lc_old');
      await db.sql('DROP FUNCTION lc_old.claim_limited');
      const claim = new LimitsRepository('lc_old').claim(prisma, 'lc.q', 5, 'w', 60_000, 5, { globalConcurrency: 1, partitionConcurrency: null, rateLimit: null });
      await expect(claim).rejects.toThrow(/lc_old\.claim_limited, .* is missing from the database or older than this instance: .*pg-queue schema install/);
    } finally {
      await prisma.$disconnect();
    }
  });

  it('claim nothing once the call has run statementMs (here: waiting for a lock held elsewhere), and refuse rules they cannot keep', async () => {
    await db.sql(`INSERT INTO pgqueue.task (queue, payload) SELECT 'lc.bound', '{}' FROM generate_series(1, 5)`);
    const call = (rules: object) =>
      db.sql(`SELECT claimed FROM pgqueue.claim_limited('lc.bound', 5, 'w', 60000, 5, $1, $2::jsonb)`, ['00000000000000aa', JSON.stringify(rules)]);
    const bounds = { release: LIMITED_CLAIM_RELEASE, lockWaitMs: 2000, idleMs: 2000, replyMs: 5000, statementMs: 5000, channel: 'pgqueue', global: 10 };
    // Another session holds the queue's lock for 1.5 s (within the call's 2 s lock wait): a call allowed 300 ms gets the lock, then gives up before claiming.
    const holder = db.prisma(1);
    try {
      const locked = deferred();
      const held = holder.$transaction(async (tx) => {
        await tx.$executeRawUnsafe(`SELECT pg_advisory_xact_lock(${LIMIT_LOCK_NAMESPACE}, hashtext('pgqueue.lc.bound'))`);
        locked.resolve();
        await new Promise((r) => setTimeout(r, 1500));
      });
      await locked.promise;
      await expect(call({ ...bounds, statementMs: 300 })).rejects.toMatchObject({ code: '57014', message: expect.stringMatching(/gave up after 300 ms, before claiming/) });
      await held;
    } finally {
      await holder.$disconnect();
    }
    expect(await db.sql(`SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = 'lc.bound' AND state = 'pending'`)).toEqual([{ n: 5 }]);
    await expect(call({ ...bounds, statementMs: undefined })).rejects.toMatchObject({ code: '22023' });
    await expect(call({ ...bounds, release: LIMITED_CLAIM_RELEASE + 1 })).rejects.toMatchObject({ code: '42883', message: expect.stringMatching(/older than its caller/) });
    const [ok] = await call(bounds);
    expect(JSON.parse(ok.claimed as string)).toHaveLength(5);
  });

  it('of partitions whose due tasks wait behind their groups pass them over, and say when to look again after a round others hold locked', async () => {
    // 40 partitions with room (1 running of 2) whose pending task waits for its group's running one,
    // then one partition with a task that may start. Walked in key order from the start.
    await db.sql(`INSERT INTO pgqueue.task (queue, payload, partition_key, group_key, state, attempt, lease_token, locked_until, started_at)
                  SELECT 'lc.held', '{}', 'b' || lpad(g::text, 2, '0'), 'g' || g, 'running', 1, gen_random_uuid(), now() + interval '1 hour', now()
                  FROM generate_series(0, 39) g`);
    await db.sql(`INSERT INTO pgqueue.task (queue, payload, partition_key, group_key)
                  SELECT 'lc.held', '{}', 'b' || lpad(g::text, 2, '0'), 'g' || g FROM generate_series(0, 39) g`);
    const [free] = await db.sql<{ id: string }>(`INSERT INTO pgqueue.task (queue, payload, partition_key) VALUES ('lc.held', '{}', 'z') RETURNING id::text`);
    // 10 partitions whose due task another transaction holds locked (SKIP LOCKED passes over it).
    await db.sql(`INSERT INTO pgqueue.task (queue, payload, partition_key) SELECT 'lc.locked', '{}', 'l' || lpad(g::text, 2, '0') FROM generate_series(0, 9) g`);
    const [later] = await db.sql<{ id: string }>(`INSERT INTO pgqueue.task (queue, payload, partition_key) VALUES ('lc.locked', '{}', 'z') RETURNING id::text`);
    const holder = new Client({ connectionString: db.url });
    await holder.connect();
    const prisma = db.prisma(1);
    try {
      const repo = new LimitsRepository('pgqueue');
      const limits = { globalConcurrency: null, partitionConcurrency: 2, rateLimit: null };
      // Before release 3 a partition counted toward the round whatever its groups: the first
      // claim's round (32 partitions) offered nothing and said nothing of when to look again.
      const first = await repo.claim(prisma, 'lc.held', 1, 'w', 60_000, 5, limits);
      expect(first.rows.map((r) => r.id)).toEqual([free.id]);

      await holder.query('BEGIN');
      await holder.query("SELECT id FROM pgqueue.task WHERE queue = 'lc.locked' AND partition_key <> 'z' FOR UPDATE");
      const empty: (number | null)[] = [];
      let took: string[] = [];
      for (let i = 0; i < 12 && took.length === 0; i++) {
        const claim = await repo.claim(prisma, 'lc.locked', 1, 'w', 60_000, 5, limits);
        took = claim.rows.map((r) => r.id);
        if (took.length === 0) empty.push(claim.nextDueInMs);
      }
      expect({ took, emptyClaims: empty.length > 0, allSayWhen: empty.every((ms) => ms === BLOCKED_ROUND_RECHECK_MS) }).toEqual({
        took: [later.id], emptyClaims: true, allSayWhen: true,
      });
    } finally {
      await holder.end();
      await prisma.$disconnect();
      await db.sql(`DELETE FROM pgqueue.task WHERE queue IN ('lc.held', 'lc.locked')`);
    }
  });

  it('of more partitions than one walk reaches, all at their limit, do not claim again at once', async () => {
    // 1 100 partitions, each with a running task (at partitionConcurrency 1) and a due one.
    await db.sql(`INSERT INTO pgqueue.task (queue, payload, partition_key, state, attempt, lease_token, locked_until, started_at)
                  SELECT 'lc.full', '{}', 'f' || lpad(g::text, 4, '0'), 'running', 1, gen_random_uuid(), now() + interval '1 hour', now()
                  FROM generate_series(1, 1100) g`);
    await db.sql(`INSERT INTO pgqueue.task (queue, payload, partition_key) SELECT 'lc.full', '{}', 'f' || lpad(g::text, 4, '0') FROM generate_series(1, 1100) g`);
    const prisma = db.prisma(1);
    try {
      const claim = await new LimitsRepository('pgqueue').claim(prisma, 'lc.full', 1, 'w', 60_000, 5, { globalConcurrency: null, partitionConcurrency: 1, rateLimit: null });
      // Before release 3: 0, so every worker with a free slot claimed in a loop under the queue's lock.
      expect({ took: claim.rows.length, nextDueInMs: claim.nextDueInMs }).toEqual({ took: 0, nextDueInMs: BLOCKED_ROUND_RECHECK_MS });
    } finally {
      await prisma.$disconnect();
      await db.sql(`DELETE FROM pgqueue.task WHERE queue = 'lc.full'`);
    }
  });

  it('of a partitioned queue probe the index once for each partition key they walk', async () => {
    // 60 partitions of 3 due tasks; a claim of 30 walks 31 of them (its round: one more than it takes).
    await db.sql(`INSERT INTO pgqueue.task (queue, payload, partition_key) SELECT 'lc.walk', '{}', 'w' || lpad((g % 60)::text, 2, '0') FROM generate_series(1, 180) g`);
    try {
      const args = ['lc.walk', 30, 'w', 60_000, 5, 1, null, 31, null, null, 1000, 0, null, 'abcdef0123456789', '{}'];
      const plan = (await db.sql<{ 'QUERY PLAN': string }>(`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) ${limitedClaims('pgqueue').partitioned}`, args))
        .map((r) => r['QUERY PLAN']);
      const walked = Number(/Recursive Union \(actual rows=(\d+)/.exec(plan.join('\n'))?.[1]);
      // The loops of every scan that looks for the next key (an Index Cond on partition_key > ...).
      let probes = 0;
      plan.forEach((line, i) => {
        if (/Index Cond: .*partition_key > /.test(line)) probes += Number(/loops=(\d+)/.exec(plan[i - 1])?.[1]);
      });
      // The walk's rows: '' (tasks without a partition, first in a round from the start) and 31 keys.
      // Before: 93 probes, the next key computed again for each of its three uses.
      expect({ walked, probesAtMostOneAKey: probes <= walked }).toEqual({ walked: 32, probesAtMostOneAKey: true });
    } finally {
      await db.sql(`DELETE FROM pgqueue.task WHERE queue = 'lc.walk'`);
    }
  });

  it("of a small partitioned queue beside a large queue read the small queue's rows, not the table (generic plans)", async () => {
    await db.sql('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    await db.sql(`ALTER DATABASE ${db.name} SET pg_stat_statements.track = 'all'`);
    const prisma = db.prisma(1);
    try {
      await db.sql(`INSERT INTO pgqueue.task (queue, payload) SELECT 'lc.skew.big', '{}' FROM generate_series(1, 100000)`);
      await db.sql(`INSERT INTO pgqueue.task (queue, payload, partition_key) SELECT 'lc.skew', '{}', 'p' || (g % 3) FROM generate_series(1, 60) g`);
      await db.sql('VACUUM ANALYZE pgqueue.task');
      const [{ pages }] = await db.sql<{ pages: number }>("SELECT relpages AS pages FROM pg_class WHERE oid = 'pgqueue.task'::regclass");
      await resetStatementStats(db);
      const repo = new LimitsRepository('pgqueue');
      // More calls than a plan cache's five custom plans before it may settle on a generic one.
      for (let i = 0; i < 8; i++) await repo.claim(prisma, 'lc.skew', 3, 'w', 60_000, 5, { globalConcurrency: null, partitionConcurrency: 1, rateLimit: null });
      const [st] = await db.sql<{ calls: number; blocks: number }>(
        `SELECT sum(calls)::int AS calls, sum(shared_blks_hit + shared_blks_read)::int AS blocks FROM pg_stat_statements WHERE ${THIS_DATABASE} AND query LIKE '%walk AS (%'`,
      );
      // A generic plan whose check for tasks without a partition was an EXISTS scanned the whole
      // table: every page, every call (1 656 blocks a claim against 1 540 pages; 354 with the
      // custom plans of release 1, 70 with release 2's generic ones and smaller rounds).
      console.log(`lc.skew: ${st.blocks / st.calls} blocks a claim, the table ${pages} pages`);
      expect({ calls: st.calls, underAThirdOfTheTable: st.blocks / st.calls < pages / 3 }).toEqual({ calls: 8, underAThirdOfTheTable: true });
    } finally {
      await prisma.$disconnect();
      await db.sql(`ALTER DATABASE ${db.name} RESET pg_stat_statements.track`);
      await db.sql(`DELETE FROM pgqueue.task WHERE queue IN ('lc.skew.big', 'lc.skew')`);
    }
  });

  it('are never JIT-compiled', async () => {
    await db.sql('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    // A session that compiles everything it can, as a large backlog's estimates make a claim do.
    await db.sql(`ALTER DATABASE ${db.name} SET jit_above_cost = 0`);
    // The claim's statements run inside claim_limited (limited-claim.function.ts): count those too.
    await db.sql(`ALTER DATABASE ${db.name} SET pg_stat_statements.track = 'all'`);
    const prisma = db.prisma(2);
    try {
      await db.sql(`INSERT INTO pgqueue.task (queue, payload, partition_key) SELECT 'lc.q', '{}', 'p' || (g % 3) FROM generate_series(1, 300) g`);
      await resetStatementStats(db);
      const repo = new LimitsRepository('pgqueue');
      const claim = await repo.claim(prisma, 'lc.q', 5, 'w', 60_000, 5, { globalConcurrency: 10, partitionConcurrency: 2, rateLimit: { max: 100, perMs: 1000 } });
      await prisma.$queryRawUnsafe("SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = 'lc.q'");
      const rows = await db.sql<{ query: string; jit_functions: number }>(
        `SELECT query, jit_functions::int FROM pg_stat_statements WHERE ${THIS_DATABASE} AND (query LIKE '%walk AS (%' OR query LIKE '%count(*)::int AS n FROM pgqueue.task%' OR query LIKE '%rate_at%')`,
      );
      const control = rows.filter((r) => r.query.includes('count(*)::int AS n FROM pgqueue.task WHERE queue'));
      const limited = rows.filter((r) => !control.includes(r));
      expect({ claimed: claim.rows.length, controlCompiles: control.map((r) => r.jit_functions > 0) }).toEqual({ claimed: 5, controlCompiles: [true] });
      expect(limited.length).toBeGreaterThanOrEqual(2);
      expect(limited.map((r) => ({ query: r.query.slice(0, 60), jit: r.jit_functions }))).toEqual(limited.map((r) => ({ query: r.query.slice(0, 60), jit: 0 })));
    } finally {
      await prisma.$disconnect();
      await db.sql(`ALTER DATABASE ${db.name} RESET jit_above_cost`);
      await db.sql(`ALTER DATABASE ${db.name} RESET pg_stat_statements.track`);
    }
  });

  /**
   * The state a rate window keeps, as text (every element, however stored): the largest row of the
   * queue's window in each table that holds rate windows.
   */
  async function windowTextBytes(queue: string): Promise<number> {
    let most = 0;
    for (const table of ['queue_state', 'partition_rate', 'rate_window']) {
      const [{ exists }] = await db.sql<{ exists: boolean }>('SELECT to_regclass($1) IS NOT NULL AS exists', [`pgqueue.${table}`]);
      if (!exists) continue;
      const [{ bytes }] = await db.sql<{ bytes: number | null }>(`SELECT max(octet_length(r::text))::int AS bytes FROM pgqueue.${table} r WHERE queue = $1`, [queue]);
      most = Math.max(most, bytes ?? 0);
    }
    return most;
  }

  it('keep a rate window of a few hundred bytes, however large max is (issue 22, item 12)', async () => {
    const prisma = db.prisma(2);
    const repo = new LimitsRepository('pgqueue');
    const rateLimit = { max: 100_000, perMs: 60_000 };
    await db.sql(`INSERT INTO pgqueue.task (queue, payload) SELECT 'lc.rate', '{}' FROM generate_series(1, 20000)`);
    await db.sql(`INSERT INTO pgqueue.task (queue, payload, partition_key) SELECT 'lc.prate', '{}', 'p' || (g % 4) FROM generate_series(1, 4000) g`);
    let claimed = 0;
    let partitionClaimed = 0;
    try {
      // Many claims inside one window: 20 000 starts queue-wide, about 1 000 per partition.
      for (let i = 0; i < 200; i++) claimed += (await repo.claim(prisma, 'lc.rate', 100, 'w', 60_000, 5, { globalConcurrency: null, partitionConcurrency: null, rateLimit })).rows.length;
      for (let i = 0; i < 40; i++) {
        partitionClaimed += (await repo.claim(prisma, 'lc.prate', 100, 'w', 60_000, 5, { globalConcurrency: null, partitionConcurrency: null, rateLimit: { ...rateLimit, perPartition: true } })).rows.length;
      }
    } finally {
      await prisma.$disconnect();
    }
    expect({ claimed, partitionClaimed }).toEqual({ claimed: 20_000, partitionClaimed: 4000 });
    // Stored as timestamps, one per start, these were ~650 kB and ~33 kB, rewritten by every claim.
    const [{ stored }] = await db.sql<{ stored: number }>("SELECT pg_column_size(q.*) AS stored FROM pgqueue.queue_state q WHERE queue = 'lc.rate'");
    // Each size, or 'small' when under its bound (a failure shows the sizes).
    const small = (bytes: number, bound: number) => (bytes > 0 && bytes < bound ? 'small' : bytes);
    expect({ queueWide: small(await windowTextBytes('lc.rate'), 2000), perPartition: small(await windowTextBytes('lc.prate'), 2000), stored: small(stored, 1000) }).toEqual({
      queueWide: 'small',
      perPartition: 'small',
      stored: 'small',
    });
  }, 120_000);

  it('keep rate windows that never hold more than max claims in any window, and lag a log of every claim by at most one step', async () => {
    const W = 1000;
    const MAX = 40;
    const STEP = W / RATE_STEPS;
    // One statement per claim: the count and when the window frees, then the entries after it.
    // $1, $2 the entries, $3 the time (epoch ms), $4 the claims wanted.
    const now = 'to_timestamp($3::float8 / 1000)';
    const room = `(${MAX} - ${windowCount('$1::timestamptz[]', '$2::int[]', String(W), now)})`;
    const sql = `
      SELECT ${windowCount('$1::timestamptz[]', '$2::int[]', String(W), now)} AS count,
             ${windowFreesInMs('$1::timestamptz[]', '$2::int[]', String(W), now)} AS frees_in_ms,
             (SELECT array_to_json(a)::text FROM ${windowAdd('$1::timestamptz[]', '$2::int[]', String(W), `greatest(0, least($4::int, ${room}))`, now)} AS w(a, n)) AS at,
             (SELECT n FROM ${windowAdd('$1::timestamptz[]', '$2::int[]', String(W), `greatest(0, least($4::int, ${room}))`, now)} AS w(a, n)) AS n`;
    let at: string[] = [];
    let n: number[] = [];
    const log: { t: number; k: number }[] = [];
    const inLog = (from: number, to: number) => log.filter((c) => c.t > from && c.t <= to).reduce((sum, c) => sum + c.k, 0);
    let seed = 7;
    const random = () => (seed = (seed * 48271) % 2147483647) / 2147483647;
    const problems: string[] = [];
    let t = Date.UTC(2026, 0, 1);
    let mostEntries = 0;
    for (let i = 0; i < 800; i++) {
      // Bursts and trickles: gaps from 0 to 40 ms, now and then a pause of up to a window.
      t += random() < 0.03 ? Math.floor(random() * W) : Math.floor(random() * 40);
      const want = 1 + Math.floor(random() * 6);
      const [r] = await db.sql<{ count: number; frees_in_ms: number | null; at: string | null; n: number[] }>(sql, [`{${at.map((a) => `"${a}"`).join(',')}}`, `{${n.join(',')}}`, t, want]);
      // Never fewer than the claims inside the window, never more than those of one step longer.
      if (r.count < inLog(t - W, t) || r.count > inLog(t - W - STEP, t)) problems.push(`at ${t}: counted ${r.count}, log ${inLog(t - W, t)} (${inLog(t - W - STEP, t)} with a step more)`);
      const took = Math.max(0, Math.min(want, MAX - r.count));
      if (took > 0) log.push({ t, k: took });
      // No window of W ms, the one ending at this claim included, holds more than MAX.
      if (inLog(t - W, t) > MAX) problems.push(`at ${t}: ${inLog(t - W, t)} claims in the window`);
      if (took < want && r.count > 0 && !(r.frees_in_ms !== null && r.frees_in_ms > 0 && r.frees_in_ms <= W)) problems.push(`at ${t}: frees in ${r.frees_in_ms}`);
      at = r.at === null ? [] : (JSON.parse(r.at) as string[]);
      n = r.n;
      mostEntries = Math.max(mostEntries, at.length);
    }
    expect(problems).toEqual([]);
    // It did fill up (the check is not empty), and the entries stayed few.
    expect({ full: log.length < 800, fewEntries: mostEntries <= RATE_STEPS + 1 }).toEqual({ full: true, fewEntries: true });
  });

  it('fill a rate window exactly to max over clients claiming at once, queue-wide and per partition', async () => {
    const repo = new LimitsRepository('pgqueue');
    await db.sql(`INSERT INTO pgqueue.task (queue, payload) SELECT 'rw.q', '{}' FROM generate_series(1, 400)`);
    await db.sql(`INSERT INTO pgqueue.task (queue, payload, partition_key) SELECT 'rw.p', '{}', 'p' || (g % 3) FROM generate_series(1, 400) g`);
    const clients = [db.prisma(2), db.prisma(2), db.prisma(2), db.prisma(2)];
    // Windows far longer than the test: every claim falls in the first, which must end up exactly full.
    const queueWide = { globalConcurrency: null, partitionConcurrency: null, rateLimit: { max: 30, perMs: 600_000 } };
    const perPartition = { ...queueWide, rateLimit: { max: 10, perMs: 600_000, perPartition: true } };
    const claimed = { 'rw.q': 0, 'rw.p': 0 } as Record<string, number>;
    const byPartition = new Map<string, number>();
    const until = Date.now() + 1500;
    await Promise.all(
      clients.map(async (prisma) => {
        while (Date.now() < until) {
          for (const [queue, limits] of [['rw.q', queueWide], ['rw.p', perPartition]] as const) {
            const claim = await repo.claim(prisma, queue, 1 + Math.floor(Math.random() * 4), 'w', 60_000, 5, limits);
            claimed[queue] += claim.rows.length;
            for (const r of claim.rows) if (r.partition_key) byPartition.set(r.partition_key, (byPartition.get(r.partition_key) ?? 0) + 1);
          }
        }
      }),
    );
    expect({ claimed, byPartition: Object.fromEntries([...byPartition].sort()) }).toEqual({ claimed: { 'rw.q': 30, 'rw.p': 30 }, byPartition: { p0: 10, p1: 10, p2: 10 } });
  });

  it('leave a partition\'s rate window to the pruner once its claims have all left it, the others kept', async () => {
    const prisma = db.prisma(2);
    await db.sql(`INSERT INTO pgqueue.task (queue, payload, partition_key) SELECT q, '{}', 'p' FROM unnest(ARRAY['rw.short', 'rw.long']) q`);
    const limits = (perMs: number) => ({ globalConcurrency: null, partitionConcurrency: null, rateLimit: { max: 5, perMs, perPartition: true } });
    const repo = new LimitsRepository('pgqueue');
    await repo.claim(prisma, 'rw.short', 1, 'w', 60_000, 5, limits(20));
    await repo.claim(prisma, 'rw.long', 1, 'w', 60_000, 5, limits(600_000));
    await new Promise((resolve) => setTimeout(resolve, 50));
    const pruned = await new TaskRepository('pgqueue', 'archive').prune(prisma, 86_400_000, 86_400_000);
    const rows = await db.sql<{ queue: string }>("SELECT queue FROM pgqueue.rate_window WHERE queue LIKE 'rw.%' AND queue <> 'rw.p' ORDER BY 1");
    expect({ quiet: pruned.quiet, rows: rows.map((r) => r.queue) }).toEqual({ quiet: 1, rows: ['rw.long'] });
  });
});
