import type { RateLimit } from '../pg-queue.options';
import type { PrismaClientLike, SqlExecutor } from '../types';
import { claimStatements } from './claim.sql';
import { limitStatements } from './limits.sql';
import type { Claim, ClaimedRow } from './statement-values';

/** The flow-control rules of one queue (see HandlerOptions). */
export interface QueueLimits {
  globalConcurrency: number | null;
  partitionConcurrency: number | null;
  rateLimit: RateLimit | null;
}

/** The most partitions one round of a partitioned claim visits (see claimPartitioned). */
const MAX_ROUND = 1000;

/** Runs the claims of queues with flow-control rules: one transaction each, under the queue's lock (see limits.sql.ts). */
export class LimitsRepository {
  private readonly sql;
  private readonly claimSql;

  constructor(private readonly schema: string) {
    this.sql = limitStatements(schema);
    this.claimSql = claimStatements(schema);
  }

  /** Claims up to `want` tasks of `queue` within its limits; the arguments are those of TaskRepository.claim. */
  claim(prisma: PrismaClientLike, queue: string, want: number, workerId: string, leaseMs: number, maxAttempts: number, limits: QueueLimits): Promise<Claim> {
    const rate = limits.rateLimit;
    // A rate limit is for the queue as a whole, or for each partition on its own.
    const queueRate = rate !== null && !rate.perPartition ? rate : null;
    const partitionRate = rate?.perPartition ? rate : null;
    const partitioned = limits.partitionConcurrency !== null || partitionRate !== null;
    return prisma.$transaction(
      async (tx: SqlExecutor) => {
        await tx.$executeRawUnsafe(this.sql.lock, `${this.schema}.${queue}`);
        const windowMs = queueRate?.perMs ?? 0;
        const [room] = await tx.$queryRawUnsafe<Room[]>(this.sql.room, queue, windowMs, partitionRate?.max ?? null, partitionRate?.perMs ?? 0);
        let take = want;
        if (limits.globalConcurrency !== null) take = Math.min(take, limits.globalConcurrency - room.running);
        // When the rate is what stops the claim, the worker's timer waits for the window to move.
        const rateBound = queueRate !== null && queueRate.max - room.window_starts < take;
        if (queueRate !== null) take = Math.min(take, queueRate.max - room.window_starts);
        const rateWait = rateBound ? room.window_frees_in_ms : null;
        if (take <= 0) return { rows: [], nextDueInMs: rateWait, dbNowMs: room.db_now_ms };

        const [res] = !partitioned
          ? await tx.$queryRawUnsafe<ClaimResult[]>(this.claimSql.claim, queue, take, workerId, leaseMs, maxAttempts)
          : await tx.$queryRawUnsafe<ClaimResult[]>(
              this.sql.claimPartitioned, queue, take, workerId, leaseMs, maxAttempts,
              limits.partitionConcurrency ?? UNLIMITED, room.cursor, Math.min(MAX_ROUND, Math.max(32, 4 * take)),
              partitionRate?.max ?? null, partitionRate?.perMs ?? 0,
            );
        const rows = JSON.parse(res.claimed) as ClaimedRow[];
        if (rows.length > 0 && (queueRate !== null || partitioned)) {
          const cursor = partitioned ? nextCursor(room.cursor, rows.map((r) => r.partition_key ?? null)) : null;
          await tx.$executeRawUnsafe(this.sql.record, queue, windowMs, cursor, rows.length);
        }
        if (rows.length > 0 && partitionRate !== null) {
          await tx.$executeRawUnsafe(this.sql.recordPartitions, queue, partitionRate.perMs, JSON.stringify(startsByPartition(rows)));
        }
        // A claim short of what it wanted may have met full partition windows: wake when one frees.
        const partitionWait = partitionRate !== null && rows.length < take ? room.partition_frees_in_ms : null;
        const nextDue = [res.next_due_in_ms, rateWait, partitionWait].filter((ms): ms is number => ms !== null);
        return { rows, nextDueInMs: nextDue.length > 0 ? Math.min(...nextDue) : null, dbNowMs: res.db_now_ms };
      },
      { maxWait: 5_000, timeout: 15_000 },
    );
  }

  /** Wakes the queue's workers on every instance: a task of a limited queue ended, so room may have freed up. */
  async announce(db: SqlExecutor, channel: string, queue: string): Promise<void> {
    await db.$executeRawUnsafe(this.sql.announce, channel, queue);
  }
}

/** Per-partition room when a partition has no concurrency limit of its own (rate limit per partition only). */
const UNLIMITED = 1_000_000;

interface Room {
  running: number;
  window_starts: number;
  window_frees_in_ms: number | null;
  cursor: string | null;
  partition_frees_in_ms: number | null;
  db_now_ms: number;
}

/** How many tasks each partition just started ('' for tasks without a partition). */
function startsByPartition(rows: ClaimedRow[]): { p: string; n: number }[] {
  const counts = new Map<string, number>();
  for (const r of rows) counts.set(r.partition_key ?? '', (counts.get(r.partition_key ?? '') ?? 0) + 1);
  return [...counts].map(([p, n]) => ({ p, n }));
}

interface ClaimResult {
  claimed: string;
  next_due_in_ms: number | null;
  db_now_ms: number;
}

/**
 * Where the next round starts: after the partition served last in this claim's round, which went
 * in key order from after `previous` and wrapped around to the partitions up to it, tasks without
 * a partition last. Serving those last ends the round (null: the next starts from the first key).
 */
export function nextCursor(previous: string | null, served: (string | null)[]): string | null {
  if (served.some((p) => p === null)) return null;
  const keys = served as string[];
  const wrapped = previous === null ? [] : keys.filter((k) => k <= previous);
  const pool = wrapped.length > 0 ? wrapped : keys;
  return pool.reduce((a, b) => (b > a ? b : a));
}
