/**
 * Retention (maintain.sql.ts, archive_partition_step in runtime-functions.ts): the archive is partitioned
 * by finish time; the pruner drops whole partitions past archiveMs and creates the coming ones,
 * deletes the default partition's old rows and dead tasks row by row, one instance at a time, and
 * never keeps the archive's writers waiting behind its DDL for longer than its lock timeout.
 */
import { Injectable } from '@nestjs/common';
import { TaskHandler } from '@app/pg-queue';
import { drainQueue, pruneHistory } from '@app/pg-queue/testing';
import { Client } from 'pg';
import { maintainStatements } from '../../libs/pg-queue/src/sql/maintain.sql';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

const DAY = 86_400_000;

@Injectable()
class DoneHandler {
  @TaskHandler('ret.q')
  handle() {
    return 'ok';
  }
}

/** Today's UTC midnight plus `days`, as SQL. */
const day = (days: number) => `(date_trunc('day', now(), 'UTC') + ${days} * interval '1 day')`;

describe('retention', () => {
  let db: TestDatabase;
  let qa: QueueApp;
  beforeAll(async () => {
    db = await createTestDatabase();
    qa = await bootQueueApp(db.prisma(), [DoneHandler], { autoStart: false, retention: { archiveMs: DAY, deadMs: DAY, archivePartitionMs: DAY } });
    // Task ids far from the archive rows the tests write directly.
    await db.sql('ALTER TABLE pgqueue.task ALTER COLUMN id RESTART WITH 1000000');
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });

  /** Daily partitions for days [from, to) around today, laid out as the pruner names them. */
  const dailyPartitions = (from: number, to: number) =>
    db.sql(`DO $$ DECLARE lo timestamptz; BEGIN
      FOR d IN ${from}..${to - 1} LOOP
        lo := ${day(0)} + d * interval '1 day';
        EXECUTE format('CREATE TABLE pgqueue.%I PARTITION OF pgqueue.task_archive (PRIMARY KEY (id)) FOR VALUES FROM (%L) TO (%L)',
                       'task_archive_p' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD_HH24MISS'), lo, lo + interval '1 day');
      END LOOP; END $$`);
  const archiveRows = (from: number, count: number, finishedAt: string) =>
    db.sql(`INSERT INTO pgqueue.task_archive (id, queue, state, payload, priority, run_at, attempt, created_at, finished_at)
            SELECT g, 'old.q', 'done', '{}', 0, now(), 1, now(), ${finishedAt} FROM generate_series(${from}, ${from + count - 1}) g`);
  /** Rows per partition, by partition name. */
  const layout = async () =>
    Object.fromEntries(
      (await db.sql<{ part: string; n: number }>(
        `SELECT c.relname AS part, (SELECT count(*)::int FROM pgqueue.task_archive a WHERE a.tableoid = c.oid) AS n
         FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'pgqueue.task_archive'::regclass ORDER BY 1`,
      )).map((r) => [r.part, r.n]),
    );
  const partName = async (days: number) =>
    (await db.sql(`SELECT 'task_archive_p' || to_char(${day(days)} AT TIME ZONE 'UTC', 'YYYYMMDD_HH24MISS') AS name`))[0].name as string;

  it('is partitioned by range of finished_at, with a default partition', async () => {
    expect(await db.sql(`SELECT c.relkind::text, pg_get_partkeydef(c.oid) AS key FROM pg_class c WHERE c.oid = 'pgqueue.task_archive'::regclass`)).toEqual([
      { relkind: 'p', key: 'RANGE (finished_at)' },
    ]);
    expect(await layout()).toEqual({ task_archive_default: 0, task_archive_legacy: 0 });
  });

  it('drops the partitions wholly past archiveMs, keeps the newer ones, and creates the coming days', async () => {
    // As after a few days of running: daily partitions from 3 days ago to today (the fresh
    // install's first partition, which reaches into tomorrow, makes way for them).
    await db.sql('DROP TABLE pgqueue.task_archive_legacy');
    await dailyPartitions(-3, 1);
    await archiveRows(1, 1000, `${day(-3)} + interval '1 hour'`);
    await archiveRows(1001, 1000, `${day(-2)} + interval '1 hour'`);
    await archiveRows(2001, 1000, `${day(-1)} + interval '1 hour'`);
    await archiveRows(3001, 10, 'now()');
    const names: string[] = [];
    for (const d of [-3, -2, -1, 0, 1, 2, 3]) names.push(await partName(d));
    const [d3, d2, d1, d0, d1p, d2p, d3p] = names;
    expect(await layout()).toMatchObject({ [d3]: 1000, [d2]: 1000, [d1]: 1000, [d0]: 10 });

    // Days -3 and -2 end more than a day ago; day -1 ends at midnight today: it holds rows up to
    // two days old until then (retention keeps archiveMs to archiveMs + archivePartitionMs).
    // Their rows are not counted but estimated: exact here, after an ANALYZE that read them all.
    await db.sql(`ANALYZE pgqueue.${d3}, pgqueue.${d2}`);
    expect(await pruneHistory(qa.app)).toEqual({ archived: 0, dead: 0, partitionsDropped: 2, droppedRowsEstimate: 2000 });
    expect(await layout()).toEqual({ [d1]: 1000, [d0]: 10, [d1p]: 0, [d2p]: 0, [d3p]: 0, task_archive_default: 0 });
    // Nothing more to do until a day ends.
    expect(await pruneHistory(qa.app)).toEqual({ archived: 0, dead: 0, partitionsDropped: 0, droppedRowsEstimate: 0 });
  });

  it("a period no partition covers still takes inserts, the completion's among them, in the default partition; its old rows are deleted one by one", async () => {
    await db.sql(`DROP TABLE pgqueue.${await partName(0)}`);
    const id = await qa.queue.enqueue('ret.q', {});
    expect(await drainQueue(qa.app, 'ret.q')).toBe(1);
    await archiveRows(5001, 3, `now() - interval '10 days'`);
    await archiveRows(5004, 2, `now() + interval '400 days'`);
    expect(await db.sql('SELECT id::int, tableoid::regclass::text AS part FROM pgqueue.task_archive WHERE id = $1 OR id BETWEEN 5001 AND 5005 ORDER BY 1', [id])).toEqual([
      ...[5001, 5002, 5003, 5004, 5005].map((n) => ({ id: n, part: 'pgqueue.task_archive_default' })),
      { id: Number(id), part: 'pgqueue.task_archive_default' },
    ].sort((a, b) => a.id - b.id));
    expect(await pruneHistory(qa.app)).toEqual({ archived: 3, dead: 0, partitionsDropped: 0, droppedRowsEstimate: 0 });
    expect(await layout()).toMatchObject({ task_archive_default: 3 });
  });

  it('deletes dead and cancelled tasks past deadMs row by row, keeping the rest', async () => {
    await db.sql(`INSERT INTO pgqueue.task (queue, state, payload, attempt, finished_at)
                  VALUES ('old.q', 'dead', '{}', 5, now() - interval '2 days'), ('old.q', 'cancelled', '{}', 1, now() - interval '3 days'),
                         ('old.q', 'dead', '{}', 5, now() - interval '1 hour'), ('old.q', 'pending', '{}', 0, NULL)`);
    expect(await pruneHistory(qa.app)).toEqual({ archived: 0, dead: 2, partitionsDropped: 0, droppedRowsEstimate: 0 });
    expect(await db.sql("SELECT state, count(*)::int AS n FROM pgqueue.task WHERE queue = 'old.q' GROUP BY 1 ORDER BY 1")).toEqual([
      { state: 'dead', n: 1 },
      { state: 'pending', n: 1 },
    ]);
  });

  it("gives up a drop after its lock timeout, so the archive's writers are not held behind it until the reader ends", async () => {
    await db.sql('DROP TABLE IF EXISTS pgqueue.task_archive_legacy'); // when run alone
    await dailyPartitions(-6, -5);
    await archiveRows(6001, 10, `${day(-6)} + interval '1 hour'`);
    const expired = await partName(-6);
    const reader = new Client({ connectionString: db.url });
    const writer = new Client({ connectionString: db.url });
    await Promise.all([reader.connect(), writer.connect()]);
    try {
      // A long reader of the archive (an operator's stats()) holds it while the pruner wants to drop.
      await reader.query('BEGIN');
      await reader.query('SELECT count(*) FROM pgqueue.task_archive');
      const started = Date.now();
      const pruning = pruneHistory(qa.app);
      await new Promise((resolve) => setTimeout(resolve, 30));
      // An archive insert queued behind the waiting DROP goes through once the DROP gives up, while
      // the reader still holds the archive: without the lock timeout it would wait for the reader,
      // which commits only after it (the test would hang, not merely run slow).
      const inserted = Date.now();
      await writer.query(`INSERT INTO pgqueue.task_archive (id, queue, state, payload, priority, run_at, attempt, created_at, finished_at)
                          VALUES (7001, 'old.q', 'done', '{}', 0, now(), 1, now(), ${day(1)} + interval '1 hour')`);
      const insertMs = Date.now() - inserted;
      if (process.env.SHOW_TIMES) console.log({ insertMs, pruneMs: Date.now() - started });
      expect(await pruning).toEqual({ archived: 0, dead: 0, partitionsDropped: 0, droppedRowsEstimate: 0 });
      expect(await layout()).toHaveProperty(expired, 10);
      await reader.query('COMMIT');
      // Never analyzed (10 rows stay below autovacuum's threshold): no estimate, counted as 0.
      expect(await pruneHistory(qa.app)).toEqual({ archived: 0, dead: 0, partitionsDropped: 1, droppedRowsEstimate: 0 });
      expect(await layout()).not.toHaveProperty(expired);
    } finally {
      await Promise.all([reader.end(), writer.end()]);
    }
  });

  it('drops an expired partition without reading it: no scan of its rows or its index, its size the planner\'s estimate', async () => {
    await db.sql('DROP TABLE IF EXISTS pgqueue.task_archive_legacy'); // when run alone
    await dailyPartitions(-9, -8);
    const expired = await partName(-9);
    // Autovacuum off for it: its locks would make the drop give up (busy) within the test.
    await db.sql(`ALTER TABLE pgqueue.${expired} SET (autovacuum_enabled = off)`);
    await archiveRows(10_001, 20_000, `${day(-9)} + interval '1 hour'`);
    await db.sql(`ANALYZE pgqueue.${expired}`);
    const [{ rel, idx }] = await db.sql(`SELECT 'pgqueue.${expired}'::regclass::oid::int AS rel, 'pgqueue.${expired}_pkey'::regclass::oid::int AS idx`);
    // A new session, one transaction: pg_stat_get_xact_* then count the step's reads alone (in
    // PostgreSQL 15 they also show a session's earlier transactions not yet flushed).
    const client = new Client({ connectionString: db.url });
    await client.connect();
    try {
      await client.query('BEGIN');
      const { rows: [step] } = await client.query(maintainStatements('pgqueue').archivePartitionStep, [DAY, 3, DAY, 'pgqueue']);
      const { rows: [reads] } = await client.query(
        `SELECT (pg_stat_get_xact_numscans($1) + pg_stat_get_xact_numscans($2))::int AS scans,
                (pg_stat_get_xact_tuples_returned($1) + pg_stat_get_xact_tuples_fetched($1) + pg_stat_get_xact_tuples_returned($2))::int AS "rowsRead"`,
        [rel, idx],
      );
      await client.query('COMMIT');
      expect(reads).toEqual({ scans: 0, rowsRead: 0 });
      expect(step).toEqual({ ran: true, action: 'dropped', partition: expired, rowsEstimate: 20_000 });
    } finally {
      await client.end();
    }
    expect(await layout()).not.toHaveProperty(expired);
  });

  it('runs on one instance at a time: a concurrent round skips while another holds the lock', async () => {
    const repo = new TaskRepository('pgqueue', 'archive');
    const holder = db.prisma(1);
    const before = await layout();
    await holder.$transaction(async (tx) => {
      await tx.$executeRawUnsafe(`SELECT pg_advisory_xact_lock(${0x706772}, hashtext('pgqueue'))`);
      expect(await repo.prune(db.prisma(1), 0, 0)).toEqual({ ran: false, archived: 0, dead: 0, quiet: 0 });
      // With the lock, a retention of -30 days would drop every partition.
      expect(await repo.archivePartitionStep(db.prisma(1), DAY, 3, -30 * DAY)).toEqual({ ran: false, action: null, partition: null, rowsEstimate: null });
    });
    expect(await layout()).toEqual(before);
  });
});
