import { claimSql, claimStatements } from '../../libs/pg-queue/src/sql/claim.sql';
import { completeStatements } from '../../libs/pg-queue/src/sql/complete.sql';
import { maintainStatements } from '../../libs/pg-queue/src/sql/maintain.sql';
import { installSchema } from '../../libs/pg-queue/src/sql/schema.installer';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import { CompletionBatcher } from '../../libs/pg-queue/src/worker/completion.batcher';
import { taskRow } from '../support/task-rows';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { genericPlan } from '../support/generic-plan';


describe('lease statements', () => {
  let db: TestDatabase;
  const repo = new TaskRepository('pgqueue', 'archive');

  beforeAll(async () => {
    db = await createTestDatabase();
    await installSchema(db.prisma(), 'pgqueue');
  });
  afterAll(() => db.drop());

  // The statistics trap: analyzed while nothing ran, so the planner believes no row is running and
  // that an unnest() of the leases has 10 rows. A join-based fence then compared every lease with
  // every running row (quadratic); the claim hash-joined against a scan of the whole table.
  it('find their rows by primary key under generic plans, whatever the statistics say', async () => {
    await db.sql(`INSERT INTO pgqueue.task (queue, payload) SELECT 'plan.q', '{}' FROM generate_series(1, 5000)`);
    await db.sql('ANALYZE pgqueue.task');
    const claim = claimStatements('pgqueue');
    const finish = completeStatements('pgqueue', 'archive');
    const leases = [`'1,2,3'`, `'${Array(3).fill('00000000-0000-4000-8000-000000000000').join(',')}'`];
    const cases: [string, string, string[], string[]][] = [
      ['claim', claimSql(claim, 500), ['text', 'int', 'text', 'float8', 'int', 'text'], [`'plan.q'`, '500', `'w'`, '60000', '5', `'0123456789abcdef'`]],
      ['lockLeases', claim.lockLeases, ['text', 'text', 'text', 'text'], [...leases, `'1000'`, `'1000'`]],
      ['complete', finish.complete, ['text', 'text', 'text', 'text', 'text', 'text', 'text'], [...leases, `'[]'`, `'ch'`, `'1,2,3'`, `'0,0,0'`, `'{}'`]],
      ['fail', finish.fail, ['text', 'text', 'text[]', 'bigint[]', 'boolean[]', 'text', 'boolean', 'bigint[]'], [...leases, `'{a,b,c}'`, `'{1,2,3}'`, `'{f,f,f}'`, `'ch'`, 'false', `'{5,NULL,7}'`]],
      ['release', finish.release, ['text', 'text', 'text'], [...leases, `'ch'`]],
      ['backOff', finish.backOff, ['text', 'text', 'text', 'jsonb'], [...leases, `'ch'`, `'{}'`]],
      ['heartbeat', finish.heartbeat, ['text', 'text', 'float8'], [...leases, '60000']],
      ['rescueExpired', maintainStatements('pgqueue').rescueExpired, ['int', 'text'], ['100', `'ch'`]],
    ];
    for (const [name, sql, types, args] of cases) {
      const plan = await genericPlan(db, sql, types, args);
      if (process.env.SHOW_PLANS) console.log(name, plan);
      // No sequential scan of the task table (task_cancel and task_archive are other tables).
      expect({ name, seqScan: /Seq Scan on task\b(?!_)/.test(plan) }).toEqual({ name, seqScan: false });
      if (name !== 'claim' && name !== 'rescueExpired') {
        expect({ name, byPrimaryKey: /Index Cond: \(id = ANY/.test(plan) }).toEqual({ name, byPrimaryKey: true });
        expect({ name, joinFilter: plan.includes('Join Filter') }).toEqual({ name, joinFilter: false });
        // The id and token lists are parsed once (an InitPlan), not again for every row a filter checks.
        const parsedPerRow = plan.split('\n').some((line) => /^\s*Filter:.*string_to_array/.test(line));
        expect({ name, parsedPerRow }).toEqual({ name, parsedPerRow: false });
        // Tokens are matched against a hashed set: `lease_token = ANY (array)` compares every row
        // with every token, quadratic in the batch size.
        const linearTokenMatch = /lease_token = ANY/.test(plan);
        expect({ name, linearTokenMatch, hashed: /hashed SubPlan/.test(plan) }).toEqual({ name, linearTokenMatch: false, hashed: true });
      } else {
        expect({ name, byPrimaryKey: /task_pkey on task t(_\d)?\s/.test(plan) }).toEqual({ name, byPrimaryKey: true });
      }
    }
  });

  it('tell a lost lease from the current lease of the same task, also in one batch', async () => {
    await db.sql('TRUNCATE pgqueue.task, pgqueue.task_archive');
    const prisma = db.prisma();
    const [id] = await repo.insert(prisma, [taskRow('twice.q')]);
    const [first] = (await repo.claim(prisma, 'twice.q', 1, 'w', 60_000, 5)).rows;
    // The first lease runs out and the same task is claimed again (by the same worker, even).
    await db.sql("UPDATE pgqueue.task SET locked_until = now() - interval '1 second' WHERE id = $1", [id]);
    expect(await repo.rescueExpired(prisma)).toEqual({ rescued: 1, dead: 0 });
    const [second] = (await repo.claim(prisma, 'twice.q', 1, 'w', 60_000, 5)).rows;
    const ran = { startedAt: performance.now(), finishedAt: performance.now() };
    const stale = { id, token: first.lease_token, ...ran };
    const current = { id, token: second.lease_token, ...ran };

    // Heartbeat extends the current lease only (results are keyed by token).
    expect([...(await repo.heartbeat(prisma, [stale, current], 60_000)).keys()]).toEqual([current.token]);
    // One statement never carries both: the fence would not know whose follow-ups to insert.
    await expect(repo.complete(prisma, [stale, current], [])).rejects.toThrow(/two leases of one task/);

    // The lease-mode batcher holds the second lease back to its own statement.
    const batcher = new CompletionBatcher(prisma, repo, 20, true);
    const followUp = (parentId: string, tag: string) => taskRow('twice.next', { parentId, payloadJson: JSON.stringify({ tag }) });
    const outcomes = await Promise.all([batcher.complete(stale, [followUp(id, 'stale')]), batcher.complete(current, [followUp(id, 'current')])]);
    expect(outcomes).toEqual(['lost', 'done']);
    expect(await db.sql("SELECT payload->>'tag' AS tag FROM pgqueue.task WHERE queue = 'twice.next'")).toEqual([{ tag: 'current' }]);
    expect(await db.sql('SELECT state, attempt FROM pgqueue.task_archive WHERE id = $1', [id])).toEqual([{ state: 'done', attempt: 2 }]);
  });

  // Tokens are matched against a set, not pairwise with ids: they must be unique per row, or a
  // stale lease of A batched with a lease of B could match A's newer lease from B's claim.
  it('refuse a stale lease batched with another task of the claim that took its task again', async () => {
    await db.sql('TRUNCATE pgqueue.task, pgqueue.task_archive');
    const prisma = db.prisma();
    const [a] = await repo.insert(prisma, [taskRow('stale.q')]);
    const [first] = (await repo.claim(prisma, 'stale.q', 1, 'w', 60_000, 5)).rows;
    await db.sql("UPDATE pgqueue.task SET locked_until = now() - interval '1 second' WHERE id = $1", [a]);
    expect(await repo.rescueExpired(prisma)).toEqual({ rescued: 1, dead: 0 });
    const [b] = await repo.insert(prisma, [taskRow('stale.q')]);
    const again = (await repo.claim(prisma, 'stale.q', 2, 'w', 60_000, 5)).rows;
    expect(again.map((r) => r.id).sort()).toEqual([a, b].sort());
    const ran = { startedAt: performance.now(), finishedAt: performance.now() };
    const leaseOfB = again.find((r) => r.id === b)!;
    const res = await repo.complete(prisma, [{ id: a, token: first.lease_token, ...ran }, { id: b, token: leaseOfB.lease_token, ...ran }], []);
    expect([...res.done]).toEqual([b]);
    expect(await db.sql('SELECT state FROM pgqueue.task WHERE id = $1', [a])).toEqual([{ state: 'running' }]);
  });

  it('look for reruns only when some lease was not finished, and still find one in a mixed batch', async () => {
    await db.sql('TRUNCATE pgqueue.task, pgqueue.task_archive');
    const prisma = db.prisma();
    const keyed = (key: string, tag: string) => taskRow('rerun.q', { dedupKey: key, onConflict: 'rerun', payloadJson: JSON.stringify({ tag }) });
    await repo.insert(prisma, ['a', 'b', 'c'].map((k) => keyed(k, 'first')));
    const claimed = (await repo.claim(prisma, 'rerun.q', 3, 'w', 60_000, 5)).rows;
    // While the three run, b is enqueued again: its completion must send it back to pending.
    const [rerunId] = await repo.insert(prisma, [keyed('b', 'second')]);
    const res = await repo.complete(prisma, claimed.map((r) => ({ id: r.id, token: r.lease_token, startedAt: 0, finishedAt: 0 })), []);
    expect({ done: res.done.size, rerun: [...res.rerun] }).toEqual({ done: 2, rerun: [rerunId] });
    expect(await db.sql("SELECT state, payload->>'tag' AS tag FROM pgqueue.task WHERE queue = 'rerun.q'")).toEqual([{ state: 'pending', tag: 'second' }]);

    // A batch whose every lease finishes never computes the set difference of the rerun lookup.
    await repo.insert(prisma, [taskRow('rerun.q'), taskRow('rerun.q')]);
    const all = (await repo.claim(prisma, 'rerun.q', 10, 'w', 60_000, 5)).rows;
    expect(all).toHaveLength(3);
    const [ids, tokens] = [all.map((r) => r.id).join(','), all.map((r) => r.lease_token).join(',')];
    const plan = (await db.sql<{ 'QUERY PLAN': string }>(`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) ${completeStatements('pgqueue', 'archive').complete}`, [ids, tokens, '[]', 'ch', all.map(() => '1').join(','), all.map(() => '0').join(','), '{}']))
      .map((r) => r['QUERY PLAN'])
      .join('\n');
    expect(plan).toMatch(/SetOp Except All \(never executed\)/);
    expect(await db.sql("SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = 'rerun.q'")).toEqual([{ n: 0 }]);
  });

  it('give each failed lease its own error, delay and fatality, also in a batch out of id order', async () => {
    await db.sql('TRUNCATE pgqueue.task, pgqueue.task_archive');
    const prisma = db.prisma();
    await repo.insert(prisma, Array.from({ length: 40 }, () => taskRow('fail.q')));
    const leases = (await repo.claim(prisma, 'fail.q', 40, 'w', 60_000, 5)).rows;
    // Reversed, so that the order of $2 differs from the order the rows are found in.
    const failures = leases.reverse().map((l, i) => ({
      id: l.id, token: l.lease_token, error: `boom ${l.id}`, delayMs: i % 2 === 0 ? 3_600_000 : 0, fatal: i % 3 === 0,
    }));
    const states = await repo.fail(prisma, failures);
    const rows = await db.sql<{ id: string; state: string; last_error: string; later: boolean }>(
      "SELECT id::text, state, last_error, run_at > now() + interval '30 minutes' AS later FROM pgqueue.task WHERE queue = 'fail.q'",
    );
    const byId = new Map(rows.map((r) => [r.id, r]));
    for (const f of failures) {
      const row = byId.get(f.id)!;
      const state = f.fatal ? 'dead' : 'pending';
      expect({ id: f.id, state: row.state, reported: states.get(f.id), error: row.last_error, later: row.later })
        .toEqual({ id: f.id, state, reported: state, error: `boom ${f.id}`, later: !f.fatal && f.delayMs > 0 });
    }
  });
});
