import { LimitsRepository } from '../../libs/pg-queue/src/sql/limits.repository';
import { installSchema } from '../../libs/pg-queue/src/sql/schema.installer';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import type { ClaimedRow } from '../../libs/pg-queue/src/sql/statement-values';
import { startOwnCluster, type OwnCluster } from '../support/own-cluster';
import { taskRow } from '../support/task-rows';

/**
 * Claims commit without waiting for their WAL flush (claim.sql.ts, limited-claim.function.ts):
 * what a crash of the database can take back, and what it cannot. This cluster commits everything
 * else synchronously and its WAL writer waits 10 s between flushes, so a claim that nothing after
 * it flushed is still in the server's WAL buffers when the server dies.
 */
describe('claims and a crash of the database', () => {
  let pg: OwnCluster;
  const repo = new TaskRepository('pgqueue', 'archive');
  const limits = new LimitsRepository('pgqueue');
  const claims: Record<string, (prisma: ReturnType<OwnCluster['prisma']>) => Promise<{ rows: ClaimedRow[] }>> = {
    plain: (prisma) => repo.claim(prisma, 'cc.q', 1, 'w', 60_000, 5),
    limited: (prisma) => limits.claim(prisma, 'cc.q', 1, 'w', 60_000, 5, { globalConcurrency: 5, partitionConcurrency: null, rateLimit: null }),
  };

  beforeAll(async () => {
    pg = await startOwnCluster('claim-crash', { synchronous_commit: 'on', wal_writer_delay: '10s' });
    const prisma = pg.prisma(1);
    await installSchema(prisma, 'pgqueue');
    await prisma.$disconnect();
  }, 60_000);
  afterAll(() => pg?.stop());
  beforeEach(() => pg.sql('TRUNCATE pgqueue.task, pgqueue.task_archive'));

  /** Inserts a task of cc.q and claims it with `kind`'s claim; returns its lease. */
  async function claimOne(kind: string): Promise<ClaimedRow> {
    const prisma = pg.prisma(1);
    try {
      const [id] = await repo.insert(prisma, [taskRow('cc.q')]);
      const { rows } = await claims[kind](prisma);
      expect(rows.map((r) => r.id)).toEqual([id]);
      return rows[0];
    } finally {
      await prisma.$disconnect();
    }
  }

  it.each(['plain', 'limited'])(
    'a %s claim the crash took back: the task is due again, that attempt uncounted, and the forgotten lease completes nothing',
    async (kind) => {
      const lease = await claimOne(kind);
      await pg.crash();
      expect(await pg.sql('SELECT state, attempt FROM pgqueue.task WHERE id = $1', [lease.id])).toEqual([{ state: 'pending', attempt: 0 }]);
      const prisma = pg.prisma(1);
      // The worker that ran it still holds the lease: fenced off, its completion writes nothing.
      const res = await repo.complete(prisma, [{ id: lease.id, token: lease.lease_token, startedAt: 0, finishedAt: 0 }], []);
      expect([...res.done]).toEqual([]);
      // It runs again, as the first attempt it is.
      const { rows } = await claims[kind](prisma);
      expect(rows.map((r) => [r.id, r.attempt])).toEqual([[lease.id, 1]]);
      await prisma.$disconnect();
    },
    60_000,
  );

  it.each(['plain', 'limited'])('a %s claim is kept by the first commit after it: a completion never outlives its claim', async (kind) => {
    const lease = await claimOne(kind);
    const prisma = pg.prisma(1);
    const res = await repo.complete(prisma, [{ id: lease.id, token: lease.lease_token, startedAt: 0, finishedAt: 0 }], []);
    expect([...res.done]).toEqual([lease.id]);
    await prisma.$disconnect();
    await pg.crash();
    expect(await pg.sql('SELECT id::text, attempt FROM pgqueue.task_archive')).toEqual([{ id: lease.id, attempt: 1 }]);
    expect(await pg.sql('SELECT count(*)::int AS n FROM pgqueue.task')).toEqual([{ n: 0 }]);
  }, 60_000);
});
