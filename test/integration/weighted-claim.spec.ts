/**
 * Weighted partitions in the partitioned claim (weights.sql.ts): a partition of weight w gets w
 * turns for every turn of a partition of weight 1, whether one claim takes many tasks or each
 * takes one (the turns a claim did not use carry over to the next, queue_state.partition_turns).
 * Claims made here directly, one after another, as the queue's lock would order them.
 */
import { LimitsRepository, type QueueLimits } from '../../libs/pg-queue/src/sql/limits.repository';
import { schemaDatabase } from '../support/schema-database';

const LIMITS: QueueLimits = { globalConcurrency: null, partitionConcurrency: 1000, rateLimit: null };

describe('weighted partitions in the partitioned claim', () => {
  const setup = schemaDatabase();

  async function backlog(queue: string, perPartition: Record<string, number>) {
    for (const [p, n] of Object.entries(perPartition)) {
      await setup.db.sql(`INSERT INTO pgqueue.task (queue, payload, partition_key) SELECT $1, '{}', $2 FROM generate_series(1, $3::int)`, [queue, p, n]);
    }
  }

  /** Claims `claims` times `take` tasks and counts the claimed tasks by partition. */
  async function claimCounts(repo: LimitsRepository, queue: string, claims: number, take: number | (() => number), limits = LIMITS) {
    const prisma = setup.db.prisma(2);
    const counts: Record<string, number> = {};
    try {
      for (let i = 0; i < claims; i++) {
        const claim = await repo.claim(prisma, queue, typeof take === 'number' ? take : take(), 'w', 60_000, 5, limits);
        for (const r of claim.rows) counts[r.partition_key ?? ''] = (counts[r.partition_key ?? ''] ?? 0) + 1;
      }
    } finally {
      await prisma.$disconnect();
    }
    return counts;
  }

  it('without weights, partitions take one turn each (as before weights)', async () => {
    await backlog('w.none', { a: 200, b: 200 });
    expect(await claimCounts(new LimitsRepository('pgqueue'), 'w.none', 40, 1)).toEqual({ a: 20, b: 20 });
  });

  it('partitionWeights 3:1: three turns for one, claims of one task each', async () => {
    await backlog('w.one', { a: 400, b: 400 });
    const repo = new LimitsRepository('pgqueue', { a: 3 });
    expect(await claimCounts(repo, 'w.one', 200, 1)).toEqual({ a: 150, b: 50 });
  });

  it('partitionWeights 3:1 over claims of every size from 1 to 7: 0.75 of the tasks within one round', async () => {
    await backlog('w.mixed', { a: 2000, b: 2000 });
    const repo = new LimitsRepository('pgqueue', { a: 3 });
    let i = 0;
    const counts = await claimCounts(repo, 'w.mixed', 301, () => 1 + (i++ % 7));
    const share = counts.a / (counts.a + counts.b);
    expect({ total: counts.a + counts.b, share: Math.abs(share - 0.75) <= 0.005 ? true : share }).toEqual({ total: 1204, share: true });
  });

  it('the enqueue weight (partition_weight) wins over partitionWeights; three partitions 1:2:5', async () => {
    await backlog('w.three', { a: 500, b: 500, c: 500 });
    await setup.db.sql(`INSERT INTO pgqueue.partition_weight (queue, partition_key, weight) VALUES ('w.three', 'c', 5), ('w.three', 'b', 2)`);
    const repo = new LimitsRepository('pgqueue', { c: 1, b: 7 });
    expect(await claimCounts(repo, 'w.three', 80, 2)).toEqual({ a: 20, b: 40, c: 100 });
  });

  it('per-partition concurrency still holds: a full partition of weight 3 leaves its turns to the others', async () => {
    await backlog('w.full', { a: 50, b: 50 });
    const repo = new LimitsRepository('pgqueue', { a: 3 });
    // Nothing ends: partitionConcurrency 2 lets each partition start 2, whatever its weight.
    expect(await claimCounts(repo, 'w.full', 10, 1, { ...LIMITS, partitionConcurrency: 2 })).toEqual({ a: 2, b: 2 });
  });
});
