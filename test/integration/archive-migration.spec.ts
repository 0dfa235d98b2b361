/**
 * Migration 11 (migrations/archive.migrations.ts) on a database that ran an earlier release: the
 * archive's rows survive the move to a partitioned table, and everything that finds archived tasks
 * by id (the operator API, dependsOn, ctx.parentResults, pipelines) still finds them, by an index
 * probe per partition.
 */
import { Injectable } from '@nestjs/common';
import { DependencyNotFoundError, TaskHandler, type Task, type TaskContext } from '@app/pg-queue';
import { drainQueue, pruneHistory } from '@app/pg-queue/testing';
import { dashboardStatements } from '../../libs/pg-queue/src/sql/dashboard.sql';
import { dependencyStatements } from '../../libs/pg-queue/src/sql/dependencies.sql';
import { inspectStatements } from '../../libs/pg-queue/src/sql/inspect.sql';
import { installSchema } from '../../libs/pg-queue/src/sql/schema.installer';
import { schemaMigrations } from '../../libs/pg-queue/src/sql/schema.sql';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { genericPlan } from '../support/generic-plan';

const ROWS = 20_000;
const joined: Record<string, unknown>[] = [];

@Injectable()
class JoinHandler {
  @TaskHandler('mig.join')
  async join(_task: Task<unknown>, ctx: TaskContext) {
    joined.push(await ctx.parentResults());
  }
}

describe('archive partitioning migration', () => {
  let db: TestDatabase;
  let qa: QueueApp;
  let checksum: { n: number; ids: string; results: string };
  const sums = async () =>
    (await db.sql(`SELECT count(*)::int AS n, sum(id)::text AS ids, sum((result->>'n')::bigint)::text AS results FROM pgqueue.task_archive`))[0];

  beforeAll(async () => {
    db = await createTestDatabase({ queueSchema: false });
    // The schema as the previous release left it, with history: ROWS archived tasks over the last
    // three days, each task after the first the child of the one before, each with a result.
    await installSchema(db.prisma(), 'pgqueue', schemaMigrations('pgqueue').filter((m) => m.version <= 10));
    await db.sql(`INSERT INTO pgqueue.task_archive (id, queue, state, payload, priority, run_at, attempt, max_attempts, parent_id,
                                                    created_at, started_at, finished_at, result)
                  SELECT g, 'mig.old', 'done', jsonb_build_object('seq', g), 0, now(), 1, 5, nullif(g - 1, 0),
                         now() - interval '3 days', now() - interval '3 days', now() - (${ROWS} - g) * interval '10 seconds',
                         jsonb_build_object('n', g)
                  FROM generate_series(1, ${ROWS}) g`);
    await db.sql(`SELECT setval(pg_get_serial_sequence('pgqueue.task', 'id'), ${ROWS})`);
    checksum = await sums();
    // The new release starts: its installer runs migration 11.
    qa = await bootQueueApp(db.prisma(), [JoinHandler], { autoStart: false });
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });

  it('keeps every row, in the old table now the first partition', async () => {
    expect(await db.sql('SELECT version, steps_done FROM pgqueue.schema_version WHERE version = 11')).toEqual([{ version: 11, steps_done: null }]);
    expect(await db.sql(`SELECT relkind::text FROM pg_class WHERE oid = 'pgqueue.task_archive'::regclass`)).toEqual([{ relkind: 'p' }]);
    expect(await sums()).toEqual(checksum);
    expect(await db.sql('SELECT tableoid::regclass::text AS part, count(*)::int AS n FROM pgqueue.task_archive GROUP BY 1')).toEqual([
      { part: 'pgqueue.task_archive_legacy', n: ROWS },
    ]);
  });

  it('finds archived tasks by id: get, chain, dependsOn and ctx.parentResults', async () => {
    expect(await qa.queue.get('12345')).toMatchObject({ id: '12345', state: 'done', payload: { seq: 12345 }, result: { n: 12345 }, parentId: '12344' });
    expect((await qa.queue.chain('3')).slice(0, 3).map((s) => [s.stage, s.id])).toEqual([
      [0, '1'],
      [1, '2'],
      [2, '3'],
    ]);
    await expect(qa.queue.enqueue('mig.join', {}, { dependsOn: ['100', String(ROWS + 10_000)] })).rejects.toThrow(DependencyNotFoundError);
    const id = await qa.queue.enqueue('mig.join', {}, { dependsOn: ['100', '19999'] });
    expect((await qa.queue.get(id))?.state).toBe('pending'); // both parents were found done in the archive
    expect(await drainQueue(qa.app, 'mig.join')).toBe(1);
    expect(joined).toEqual([{ 100: { n: 100 }, 19999: { n: 19999 } }]);
    expect((await qa.queue.get(id))?.state).toBe('done');
  });

  it('looks tasks up by id with an index probe per partition, in generic plans', async () => {
    // A pruner round creates the coming partitions; give each rows (the default partition too,
    // with rows from a year ahead), so that no plan is an index scan only because a table is empty.
    await pruneHistory(qa.app);
    const parts = [
      ...(await db.sql<{ rel: string; upper: Date }>('SELECT rel::text, upper_bound AS upper FROM pgqueue.archive_partitions()')),
      { rel: 'pgqueue.task_archive_default', upper: new Date(Date.now() + 400 * 86_400_000) },
    ];
    expect(parts.length).toBeGreaterThanOrEqual(4);
    let next = ROWS + 100_000;
    for (const p of parts.filter((x) => x.rel !== 'pgqueue.task_archive_legacy')) {
      await db.sql(`INSERT INTO pgqueue.task_archive (id, queue, state, payload, priority, run_at, attempt, parent_id, created_at, finished_at)
                    SELECT g, 'mig.new', 'done', '{}', 0, now(), 1, g - 1, now(), $1::timestamptz - interval '1 hour' - g * interval '1 ms'
                    FROM generate_series($2::int, $2::int + 4999) g`, [p.upper, next]);
      next += 10_000;
    }
    await db.sql('ANALYZE pgqueue.task_archive');
    const inspect = inspectStatements('pgqueue');
    const deps = dependencyStatements('pgqueue');
    const dashboard = dashboardStatements('pgqueue');
    const row = `'[{"queue":"mig.join","payload":{},"priority":0,"run_at_in":null,"delay_ms":0,"max_attempts":null,"parent_id":null,"dedup_key":null,"group_key":null,"trace_context":null,"partition_key":null}]'`;
    const cases: [string, string, string[], string[]][] = [
      ['get', inspect.get, ['text'], [`'12345'`]],
      ['chain', inspect.chain, ['text'], [`'12345'`]],
      ['dashboard task', dashboard.task, ['text'], [`'12345'`]],
      ['dashboard chain', dashboard.chain, ['text', 'int'], [`'12345'`, '200']],
      ['missingParents', deps.missingParents, ['text'], [`'100,200'`]],
      ['insertDependants', deps.insertDependants, ['text', 'text', 'text', 'text'], [row, `'ch'`, `'[{"c":1,"p":"100"},{"c":1,"p":"200"}]'`, `'[]'`]],
      ['debtsOfEnded', deps.debtsOfEnded, ['text', 'text', 'text'], [`'1,1'`, `'100,200'`, `'ch'`]],
    ];
    for (const [name, sql, types, args] of cases) {
      const plan = await genericPlan(db, sql, types, args);
      if (process.env.SHOW_PLANS) console.log(name, plan);
      expect({ name, seqScan: /Seq Scan on task_archive/.test(plan) }).toEqual({ name, seqScan: false });
      for (const p of parts) {
        const probed = new RegExp(`Index (Only )?Scan using \\S+ on ${p.rel.replace('pgqueue.', '')}\\b`).test(plan);
        expect({ name, partition: p.rel, probed }).toEqual({ name, partition: p.rel, probed: true });
      }
    }
  });
});
