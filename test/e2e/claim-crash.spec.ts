import { LimitsRepository } from '../../libs/pg-queue/src/sql/limits.repository';
import { installSchema } from '../../libs/pg-queue/src/sql/schema.installer';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import type { ClaimedRow } from '../../libs/pg-queue/src/sql/statement-values';
import { startOwnCluster, type OwnCluster } from '../support/own-cluster';
import { taskRow } from '../support/task-rows';

/**
 * A claim waits for its WAL flush like every other write of the queue, so a crash of the database
 * right after it keeps it: the attempt stays counted (a task that brings the server down ends
 * dead after its attempts), its worker's lease still completes, and no other worker takes the
 * task while that lease holds (one runner at a time, limits held). Committed without the flush, a
 * claim was measurably faster and lost all three (BENCHMARKS.md, probes that did not pay). This
 * cluster's WAL writer waits 10 s between flushes and nothing else runs on it, so a claim that
 * did not flush at its commit would still be in the server's WAL buffers when it dies.
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
    pg = await startOwnCluster('claim-crash', { synchronous_commit: 'on', wal_writer_delay: '10s', autovacuum: 'off' });
    const prisma = pg.prisma(1);
    await installSchema(prisma, 'pgqueue');
    await prisma.$disconnect();
  }, 60_000);
  afterAll(() => pg?.stop());
  beforeEach(() => pg.sql('TRUNCATE pgqueue.task, pgqueue.task_archive'));

  it.each(['plain', 'limited'])('a %s claim outlives a crash right after it: counted, held, and its lease completes', async (kind) => {
    const first = pg.prisma(1);
    const [id] = await repo.insert(first, [taskRow('cc.q')]);
    const { rows } = await claims[kind](first);
    expect(rows.map((r) => r.id)).toEqual([id]);
    await first.$disconnect();
    await pg.crash();

    expect(await pg.sql('SELECT state, attempt FROM pgqueue.task WHERE id = $1', [id])).toEqual([{ state: 'running', attempt: 1 }]);
    const prisma = pg.prisma(1);
    expect((await claims[kind](prisma)).rows).toEqual([]);
    const res = await repo.complete(prisma, [{ id, token: rows[0].lease_token, startedAt: 0, finishedAt: 0 }], []);
    expect([...res.done]).toEqual([id]);
    await prisma.$disconnect();
  }, 60_000);
});
