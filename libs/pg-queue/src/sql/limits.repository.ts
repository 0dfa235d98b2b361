import type { PrismaClientLike, RateLimit, SqlExecutor } from '../types';
import { AGING_LEVELS, agingStatements } from './aging.sql';
import { claimStatements, newClaimId } from './claim.sql';
import { notifyChannel } from './identifiers';
import type { ResolvedLimiter, ResolvedLimiters } from '../limiter.options';
import { limiterStatements } from './limiter.sql';
import { limitStatements } from './limits.sql';
import { assertReadCommitted, inReadCommitted } from './read-committed';
import type { Claim, ClaimedRow } from './statement-values';

/** The flow-control rules of one queue (see HandlerOptions). */
export interface QueueLimits {
  globalConcurrency: number | null;
  partitionConcurrency: number | null;
  rateLimit: RateLimit | null;
  /** Priority aging (aging.sql.ts); null or absent: none. Not with partitions. */
  priorityAgingMs?: number | null;
  /** A named limiter (limiter.sql.ts), looked up in the module's `limiters`. */
  limiter?: string | null;
}

/**
 * How soon a claim that a limiter's concurrency cut short claims again: room a limiter frees may
 * come from another queue's ending, which this queue's worker hears nothing of.
 */
export const LIMITER_RECHECK_MS = 250;

/** The most partitions with room one round of a partitioned claim offers (see claimPartitioned). */
const MAX_ROUND = 1000;
/** The most partitions one partitioned claim walks; a longer round goes on in the next claim. */
const MAX_WALK = 1000;

/**
 * Bounds of a limited claim's transaction, which holds its queue's lock (see `lock` in
 * limits.sql.ts): how long a claimer waits for the lock, how long the server lets the transaction
 * sit idle between statements before it ends the session (a stalled holder), how long any one of
 * its statements may run, and how long Prisma lets the whole transaction last. A claim still in
 * flight past `transactionMs` is reported as stuck (QueueWorker.status).
 */
export const LIMITED_CLAIM_BOUNDS = { lockWaitMs: 2000, idleMs: 2000, statementMs: 5000, transactionMs: 10_000 } as const;

/** Runs the claims of queues with flow-control rules: one transaction each, under the queue's lock (see limits.sql.ts). */
export class LimitsRepository {
  private readonly sql;
  private readonly claimSql;
  private readonly agingSql;
  private readonly channel: string;

  /** The module's partitionWeights as JSON (null: none), $13 of the partitioned claim. */
  private readonly weights: string | null;
  private readonly limiterSql;
  /** The module's named limiters (limiter.sql.ts). */
  private readonly limiters: ResolvedLimiters;

  constructor(
    private readonly schema: string,
    { partitionWeights = {}, limiters = new Map() }: { partitionWeights?: Readonly<Record<string, number>>; limiters?: ResolvedLimiters } = {},
  ) {
    this.weights = Object.keys(partitionWeights).length > 0 ? JSON.stringify(partitionWeights) : null;
    this.limiters = limiters;
    this.sql = limitStatements(schema);
    this.limiterSql = limiterStatements(schema);
    this.claimSql = claimStatements(schema);
    this.agingSql = agingStatements(schema);
    this.channel = notifyChannel(schema);
  }

  /** Claims up to `want` tasks of `queue` within its limits; the arguments are those of TaskRepository.claim. */
  claim(prisma: PrismaClientLike, queue: string, want: number, workerId: string, leaseMs: number, maxAttempts: number, limits: QueueLimits, claimId: string = newClaimId()): Promise<Claim> {
    const rate = limits.rateLimit;
    // A rate limit is for the queue as a whole, or for each partition on its own.
    const queueRate = rate !== null && !rate.perPartition ? rate : null;
    const partitionRate = rate?.perPartition ? rate : null;
    const partitioned = limits.partitionConcurrency !== null || partitionRate !== null;
    const b = LIMITED_CLAIM_BOUNDS;
    // READ COMMITTED whatever the database's default: each statement must see the claims that
    // committed before the lock was granted (see limits.sql.ts, read-committed.ts).
    return inReadCommitted(
      prisma,
      { maxWait: 5_000, timeout: b.transactionMs },
      async (tx: SqlExecutor) => {
        const [locked] = await tx.$queryRawUnsafe<{ isolation: string }[]>(this.sql.lock, `${this.schema}.${queue}`, String(b.lockWaitMs), String(b.idleMs), String(b.statementMs));
        assertReadCommitted(locked);
        const windowMs = queueRate?.perMs ?? 0;
        const limiter = limits.limiter ? (this.limiters.get(limits.limiter) ?? null) : null;
        const [room] = await tx.$queryRawUnsafe<Room[]>(this.sql.room, queue, windowMs, partitionRate?.max ?? null, partitionRate?.perMs ?? 0, limiter?.name ?? null);
        // Paused as a whole (pause.sql.ts): nothing to claim, nothing to record; a resume wakes the workers.
        if (room.paused) return { rows: [], nextDueInMs: null, dbNowMs: room.db_now_ms, paused: true };
        // Backed off, the queue or its limiter (backoff.sql.ts): nothing to claim until it ends.
        if (room.backed_off_ms !== null) return { rows: [], nextDueInMs: room.backed_off_ms, dbNowMs: room.db_now_ms };
        // A limiter's budget (limiter.sql.ts), under its lock, taken after the queue's.
        const shared = limiter === null ? null : await this.limiterRoom(tx, limiter);
        let take = want;
        if (shared !== null) take = Math.min(take, shared.take);
        if (limits.globalConcurrency !== null) take = Math.min(take, limits.globalConcurrency - room.running);
        // When the rate is what stops the claim, the worker's timer waits for the window to move.
        const rateBound = queueRate !== null && queueRate.max - room.window_count < take;
        if (queueRate !== null) take = Math.min(take, queueRate.max - room.window_count);
        const rateWait = rateBound ? room.window_frees_in_ms : null;
        if (take <= 0) {
          const wanted = roomWanted(limits, partitioned, room, want, take, 0, null);
          if (wanted !== null) await tx.$executeRawUnsafe(this.sql.record, queue, windowMs, room.cursor, 0, wanted, this.channel, room.turns);
          const waits = [rateWait, shared !== null && shared.take <= 0 ? shared.waitMs : null].filter((ms): ms is number => ms !== null);
          return { rows: [], nextDueInMs: waits.length > 0 ? Math.min(...waits) : null, dbNowMs: room.db_now_ms };
        }

        const aging = limits.priorityAgingMs ?? null;
        const [res] = !partitioned
          ? aging === null
            ? await tx.$queryRawUnsafe<ClaimResult[]>(this.claimSql.claim, queue, take, workerId, leaseMs, maxAttempts, claimId)
            : await tx.$queryRawUnsafe<ClaimResult[]>(this.agingSql.claim, queue, take, workerId, leaseMs, maxAttempts, aging, AGING_LEVELS, claimId)
          : await tx.$queryRawUnsafe<ClaimResult[]>(
              this.sql.claimPartitioned, queue, take, workerId, leaseMs, maxAttempts,
              limits.partitionConcurrency ?? UNLIMITED, room.cursor, Math.min(MAX_ROUND, Math.max(32, 4 * take)),
              partitionRate?.max ?? null, partitionRate?.perMs ?? 0, MAX_WALK, room.cursor === null ? 0 : room.turns, this.weights, claimId,
            );
        const rows = JSON.parse(res.claimed) as ClaimedRow[];
        // The round's cursor moves past every partition the claim walked, served or not.
        const cursor = partitioned ? (res.next_cursor ?? null) : null;
        const turns = partitioned ? (res.next_turns ?? 0) : 0;
        const wanted = roomWanted(limits, partitioned, room, want, take, rows.length, res);
        if ((rows.length > 0 && queueRate !== null) || (partitioned && (rows.length > 0 || cursor !== room.cursor || turns !== room.turns)) || wanted !== null) {
          await tx.$executeRawUnsafe(this.sql.record, queue, windowMs, cursor, rows.length, wanted, this.channel, turns);
        }
        if (rows.length > 0 && partitionRate !== null) {
          await tx.$executeRawUnsafe(this.sql.recordPartitions, queue, partitionRate.perMs, JSON.stringify(startsByPartition(rows)));
        }
        if (rows.length > 0 && limiter?.rateLimit) await tx.$executeRawUnsafe(this.limiterSql.record, limiter.name, limiter.rateLimit.perMs, rows.length);
        // A claim short of what it wanted may have met full partition windows: wake when one frees.
        const partitionWait = partitionRate !== null && rows.length < take ? room.partition_frees_in_ms : null;
        // A round cut short by MAX_WALK goes on at once from where it stopped.
        const walkOn = res.walk_cut && rows.length < take ? 0 : null;
        // Only when the limiter is what cut the claim (it took all the limiter allowed): an idle queue must not poll.
        const limiterWait = shared !== null && shared.take < want && rows.length >= shared.take ? shared.waitMs : null;
        const nextDue = [res.next_due_in_ms, rateWait, partitionWait, walkOn, limiterWait].filter((ms): ms is number => ms !== null);
        return { rows, nextDueInMs: nextDue.length > 0 ? Math.min(...nextDue) : null, dbNowMs: res.db_now_ms };
      },
    );
  }

  /**
   * Takes the limiter's lock and reads what its budget leaves: `take`, the most this claim may
   * start, and `waitMs`, when to look again if that is short (its window frees, or
   * LIMITER_RECHECK_MS for its concurrency).
   */
  private async limiterRoom(tx: SqlExecutor, limiter: ResolvedLimiter): Promise<{ take: number; waitMs: number | null }> {
    await tx.$executeRawUnsafe(this.limiterSql.lock, `${this.schema}.${limiter.name}`);
    const [r] = await tx.$queryRawUnsafe<{ running: number; window_count: number; window_frees_in_ms: number | null }[]>(
      this.limiterSql.room, limiter.name, limiter.rateLimit?.perMs ?? 0,
    );
    const byConcurrency = limiter.concurrency === null ? Infinity : limiter.concurrency - r.running;
    const byRate = limiter.rateLimit === null ? Infinity : limiter.rateLimit.max - r.window_count;
    const waitMs = byRate <= byConcurrency ? r.window_frees_in_ms : LIMITER_RECHECK_MS;
    return { take: Math.min(byConcurrency, byRate), waitMs };
  }

  /** Wakes the queue's workers on every instance: room freed up that this instance will not take. */
  async announce(db: SqlExecutor, queue: string): Promise<void> {
    await db.$executeRawUnsafe(this.sql.announce, this.channel, queue);
  }
}

/**
 * What a claim records about room (`room_wanted`, see `record` in limits.sql.ts): true when a
 * concurrency rule cut it short while tasks were due (unless a claim already said so); false when
 * one had, and this claim took all it wanted and left room (the room is announced); else null.
 * Room left: below the global limit, and for a partitioned claim, offered tasks it did not take.
 */
function roomWanted(limits: QueueLimits, partitioned: boolean, room: Room, want: number, take: number, taken: number, res: ClaimResult | null): boolean | null {
  const g = limits.globalConcurrency;
  const cut = (g !== null && g - room.running < want) || (partitioned && taken < take && res?.partition_full === true);
  if (cut && room.due) return room.room_wanted ? null : true;
  const roomLeft = (g === null || g - room.running - taken > 0) && (!partitioned || res?.room_left === true);
  return room.room_wanted && taken === want && roomLeft ? false : null;
}

/** Per-partition room when a partition has no concurrency limit of its own (rate limit per partition only). */
const UNLIMITED = 1_000_000;

interface Room {
  running: number;
  /** Claims inside the queue-wide rate window. */
  window_count: number;
  window_frees_in_ms: number | null;
  cursor: string | null;
  /** The turns the cursor's partition has left in its visit (weights.sql.ts). */
  turns: number;
  partition_frees_in_ms: number | null;
  db_now_ms: number;
  /** A claim that a concurrency rule cut short waits for room. */
  room_wanted: boolean;
  /** Some task of the queue is due. */
  due: boolean;
  /** The queue is paused as a whole. */
  paused: boolean;
  /** The queue or its limiter is backed off for this many more ms (null: it is not). */
  backed_off_ms: number | null;
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
  /** Partitioned claims: where the next round starts, and whether this one stopped at MAX_WALK. */
  next_cursor?: string | null;
  next_turns?: number;
  walk_cut?: boolean;
  /** Partitioned claims: a partition is at its concurrency limit; the round offered tasks the claim did not take. */
  partition_full?: boolean;
  room_left?: boolean;
}

