import { pruneHistory } from '@app/pg-queue/testing';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

describe('retention', () => {
  let db: TestDatabase;
  let qa: QueueApp;
  beforeAll(async () => {
    db = await createTestDatabase();
    qa = await bootQueueApp(db.prisma(), [], { autoStart: false, retention: { archiveMs: 3_600_000, deadMs: 86_400_000 } });
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });

  it('deletes archived tasks past archiveMs and dead ones past deadMs, keeping the rest', async () => {
    // 12 000 archived tasks: 10 000 two hours old, 2 000 fresh; dead tasks two days and one hour old.
    await db.sql(`INSERT INTO pgqueue.task_archive (id, queue, state, payload, priority, run_at, attempt, max_attempts, created_at, finished_at)
                  SELECT g, 'old.q', 'done', '{}', 0, now(), 1, 5, now(), now() - CASE WHEN g <= 10000 THEN interval '2 hours' ELSE interval '1 minute' END
                  FROM generate_series(1, 12000) g`);
    await db.sql(`INSERT INTO pgqueue.task (queue, state, payload, attempt, finished_at)
                  VALUES ('old.q', 'dead', '{}', 5, now() - interval '2 days'), ('old.q', 'dead', '{}', 5, now() - interval '1 hour'),
                         ('old.q', 'pending', '{}', 0, NULL)`);
    expect(await pruneHistory(qa.app)).toEqual({ archived: 10_000, dead: 1 });
    expect(await db.sql('SELECT count(*)::int AS n FROM pgqueue.task_archive')).toEqual([{ n: 2000 }]);
    expect(await db.sql("SELECT state, count(*)::int AS n FROM pgqueue.task GROUP BY 1 ORDER BY 1")).toEqual([
      { state: 'dead', n: 1 },
      { state: 'pending', n: 1 },
    ]);
  });

  it('runs on one instance at a time: a concurrent round skips while another holds the lock', async () => {
    const repo = new TaskRepository('pgqueue', 'archive');
    const holder = db.prisma(1);
    await holder.$transaction(async (tx) => {
      await tx.$executeRawUnsafe(`SELECT pg_advisory_xact_lock(${0x706772}, hashtext('pgqueue'))`);
      const other = await repo.prune(db.prisma(1), 0, 0);
      expect(other).toEqual({ ran: false, archived: 0, dead: 0, quiet: 0 });
    });
  });
});
