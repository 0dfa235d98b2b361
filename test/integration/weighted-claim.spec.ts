/**
 * Weighted partitions in the partitioned claim (claim.sql.ts): a partition of weight w gets w
 * turns for every turn of a partition of weight 1, whether one claim takes many tasks or each
 * takes one (the turns a claim did not use carry over to the next, queue_state.partition_turns).
 * Claims made here directly, one after another, as the queue's lock would order them.
 */
import { LimitsRepository, type QueueLimits } from '../../libs/pg-queue/src/sql/limits.repository';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import { schemaDatabase } from '../support/schema-database';
import { taskRow } from '../support/task-rows';

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
    const repo = new LimitsRepository('pgqueue', { partitionWeights: { a: 3 } });
    expect(await claimCounts(repo, 'w.one', 200, 1)).toEqual({ a: 150, b: 50 });
  });

  it('partitionWeights 3:1 over claims of every size from 1 to 7: 0.75 of the tasks within one round', async () => {
    await backlog('w.mixed', { a: 2000, b: 2000 });
    const repo = new LimitsRepository('pgqueue', { partitionWeights: { a: 3 } });
    let i = 0;
    const counts = await claimCounts(repo, 'w.mixed', 301, () => 1 + (i++ % 7));
    const share = counts.a / (counts.a + counts.b);
    expect({ total: counts.a + counts.b, share: Math.abs(share - 0.75) <= 0.005 ? true : share }).toEqual({ total: 1204, share: true });
  });

  it('the enqueue weight (partition_weight) wins over partitionWeights; three partitions 1:2:5', async () => {
    await backlog('w.three', { a: 500, b: 500, c: 500 });
    await setup.db.sql(`INSERT INTO pgqueue.partition_weight (queue, partition_key, weight) VALUES ('w.three', 'c', 5), ('w.three', 'b', 2)`);
    const repo = new LimitsRepository('pgqueue', { partitionWeights: { c: 1, b: 7 } });
    expect(await claimCounts(repo, 'w.three', 80, 2)).toEqual({ a: 20, b: 40, c: 100 });
  });

  it('per-partition concurrency still holds: a full partition of weight 3 leaves its turns to the others', async () => {
    await backlog('w.full', { a: 50, b: 50 });
    const repo = new LimitsRepository('pgqueue', { partitionWeights: { a: 3 } });
    // Nothing ends: partitionConcurrency 2 lets each partition start 2, whatever its weight.
    expect(await claimCounts(repo, 'w.full', 10, 1, { ...LIMITS, partitionConcurrency: 2 })).toEqual({ a: 2, b: 2 });
  });

  // The claim's state row is written when something changed (a claim, the cursor, the turns), not
  // by every claim that finds nothing: idle instances polling a partitioned queue write nothing.
  it('a partitioned claim that finds nothing and moves nothing writes no state', async () => {
    await backlog('w.idle', { a: 1 });
    const repo = new LimitsRepository('pgqueue', { partitionWeights: { a: 3 } });
    await claimCounts(repo, 'w.idle', 2, 1); // takes the task; the second claim finds nothing
    const version = () => setup.db.sql<{ v: string }>("SELECT xmin::text AS v FROM pgqueue.queue_state WHERE queue = 'w.idle'");
    const before = await version();
    expect(await claimCounts(repo, 'w.idle', 3, 1)).toEqual({});
    expect(await version()).toEqual(before);
  });

  // A business transaction that set a partition's weight (a new partition, or a new weight) holds
  // that row until it ends: other enqueues of the partition must not wait for it (docs/design.md, "No one stalls everyone"), in
  // their own transaction or in the caller's, nor deadlock with it.
  it('an enqueue with a weight never waits for another transaction that set the same weight row', async () => {
    const repo = new TaskRepository('pgqueue', 'archive');
    const holder = setup.db.prisma(1);
    const other = setup.db.prisma(2);
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => (entered = resolve));
    const held = holder.$transaction(async (tx) => {
      await repo.insert(tx, [taskRow('w.wait', { partitionKey: 'p9', weight: 3 }), taskRow('w.wait', { partitionKey: 'p8', weight: 2 })]);
      entered();
      await released;
    }, { timeout: 60_000 });
    let timer: NodeJS.Timeout | undefined;
    try {
      await inside;
      // Cleared below: left pending, it kept Jest from exiting after the run ("did not exit").
      const stuck = new Promise<string>((resolve) => (timer = setTimeout(() => resolve('stuck'), 5000)));
      const own = repo.insert(other, [taskRow('w.wait', { partitionKey: 'p8', weight: 4 }), taskRow('w.wait', { partitionKey: 'p9', weight: 4 })]).then(() => 'done');
      expect(await Promise.race([own, stuck])).toBe('done');
      const inTx = other.$transaction((tx) => repo.insert(tx, [taskRow('w.wait', { partitionKey: 'p9', weight: 5 })])).then(() => 'done');
      expect(await Promise.race([inTx, stuck])).toBe('done');
    } finally {
      clearTimeout(timer);
      release();
      await held;
      await holder.$disconnect();
      await other.$disconnect();
    }
    expect(await setup.db.sql("SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = 'w.wait'")).toEqual([{ n: 5 }]);
  });
});
