import type { PrismaClientLike, RateLimit, SqlExecutor } from '../types';
import { PgQueueError } from '../errors';
import { newClaimId } from './claim.sql';
import { databaseError } from './database-error';
import { notifyChannel } from './identifiers';
import type { ResolvedLimiters } from '../limiter.options';
import { LIMITED_CLAIM_RELEASE, limitedClaim } from './limited-claim.function';
import { parseMarker, runtimeFunctionIdentity } from './runtime-functions';
import { limitStatements } from './limits.sql';
import { readCommittedCall } from './read-committed';
import type { Claim, ClaimedRow } from './statement-values';

/** The flow-control rules of one queue (see HandlerOptions). */
export interface QueueLimits {
  globalConcurrency: number | null;
  partitionConcurrency: number | null;
  rateLimit: RateLimit | null;
  /** Priority aging (the aging claim, claim.sql.ts); null or absent: none. Not with partitions. */
  priorityAgingMs?: number | null;
  /** A named limiter (limiter.sql.ts), looked up in the module's `limiters`. */
  limiter?: string | null;
}

/**
 * Bounds of a limited claim (see claim_limited): how long a claimer waits for the queue's lock;
 * how long the server lets a claim's own transaction sit idle before it ends the session (only
 * under a database whose default level is not READ COMMITTED); how long its reply may go
 * unacknowledged (tcp_user_timeout) before the server drops the connection: long enough for a
 * live client whose event loop is held up (a CPU-bound handler, a long GC pause) to read on, short
 * enough that a dead one does not hold the queue up for long; how long the call may have run and
 * still claim; and how long a claim may be in flight before it is reported as stuck
 * (QueueWorker.status): by then it has committed or rolled back (statementMs, its records, then
 * replyMs), so it is also how long a lost answer's rows are looked for (OwedOutcomes).
 */
export const LIMITED_CLAIM_BOUNDS = { lockWaitMs: 2000, idleMs: 2000, replyMs: 10_000, statementMs: 5000, transactionMs: 20_000 } as const;

/** Runs the claims of queues with flow-control rules: one call of claim_limited each (limited-claim.function.ts). */
export class LimitsRepository {
  private readonly sql;
  private readonly channel: string;
  /** The module's partitionWeights (null: none). */
  private readonly weights: Readonly<Record<string, number>> | null;
  /** The module's named limiters (limiter.sql.ts). */
  private readonly limiters: ResolvedLimiters;
  private readonly rules = new WeakMap<QueueLimits, string>();

  constructor(
    private readonly schema: string,
    { partitionWeights = {}, limiters = new Map() }: { partitionWeights?: Readonly<Record<string, number>>; limiters?: ResolvedLimiters } = {},
  ) {
    this.weights = Object.keys(partitionWeights).length > 0 ? partitionWeights : null;
    this.limiters = limiters;
    this.sql = limitStatements(schema);
    this.channel = notifyChannel(schema);
  }

  /** Claims up to `want` tasks of `queue` within its limits; the arguments are those of TaskRepository.claim. */
  async claim(
    prisma: PrismaClientLike,
    queue: string,
    want: number,
    workerId: string,
    leaseMs: number,
    maxAttempts: number,
    limits: QueueLimits,
    claimId: string = newClaimId(),
    ending: readonly string[] = [],
  ): Promise<Claim> {
    // The queue's rules are built once (rulesOf); a claim's endings are appended to that object's text.
    const rules = ending.length === 0 ? this.rulesOf(limits) : `${this.rulesOf(limits).slice(0, -1)},"ending":${JSON.stringify(ending)}}`;
    // READ COMMITTED whatever the database's default: each statement of claim_limited must see the
    // claims that committed before the lock was granted (see limits.sql.ts, read-committed.ts).
    const res = await readCommittedCall(prisma, { maxWait: 5_000, timeout: LIMITED_CLAIM_BOUNDS.transactionMs }, async (db: SqlExecutor) => {
      const [row] = await db.$queryRawUnsafe<LimitedClaimRow[]>(this.sql.claim, queue, want, workerId, leaseMs, maxAttempts, claimId, rules);
      return row;
    }).catch((err: unknown) => {
      // 42883: the function is not there, or older than this instance (a schema installed by hand from an older release's SQL).
      if (databaseError(err)?.code !== '42883') throw err;
      throw this.notInstalled('missing from the database or older than this instance', databaseError(err)?.message);
    });
    const claim: Claim = { rows: JSON.parse(res.claimed) as ClaimedRow[], nextDueInMs: res.next_due_in_ms, dbNowMs: res.db_now_ms, full: res.limit_full === true };
    return res.paused ? { ...claim, paused: true } : claim;
  }

  /**
   * At a start without installSchema, when a handler has flow-control rules: claim_limited is in
   * place at this instance's release or a newer one. A schema kept by applying printed SQL may hold
   * an older one, or none, with no migration to tell: fail the start, not every claim after it.
   */
  async assertInstalled(db: SqlExecutor): Promise<void> {
    const identity = runtimeFunctionIdentity(this.schema, limitedClaim);
    const [row] = await db.$queryRawUnsafe<{ present: boolean; comment: string | null }[]>(
      `SELECT to_regprocedure($1) IS NOT NULL AS present, obj_description(to_regprocedure($1), 'pg_proc') AS comment`,
      identity,
    );
    const release = row.present ? (parseMarker(row.comment)?.release ?? 0) : null;
    if (release !== null && release >= LIMITED_CLAIM_RELEASE) return;
    throw this.notInstalled(release === null ? 'missing from the database' : `at release ${release}, older than this instance's ${LIMITED_CLAIM_RELEASE}`);
  }

  /** claim_limited is not there as this instance needs it (`state`): what to run. */
  private notInstalled(state: string, detail?: string): PgQueueError {
    return new PgQueueError(
      `pg-queue: ${this.schema}.claim_limited, which claims of queues with flow-control rules call, is ${state}: ` +
        `start an instance with installSchema, or run \`pg-queue schema install\` (or apply \`pg-queue schema print\`)${detail ? `; ${detail}` : ''}`,
    );
  }

  /** `limits` as claim_limited reads them (see there), built once per limits object: they name no queue. */
  private rulesOf(limits: QueueLimits): string {
    let rules = this.rules.get(limits);
    if (rules === undefined) this.rules.set(limits, (rules = this.rulesJson(limits)));
    return rules;
  }

  private rulesJson(limits: QueueLimits): string {
    const rate = limits.rateLimit;
    const limiter = limits.limiter ? (this.limiters.get(limits.limiter) ?? null) : null;
    const partitioned = limits.partitionConcurrency !== null || rate?.perPartition === true;
    const b = LIMITED_CLAIM_BOUNDS;
    return JSON.stringify({
      release: LIMITED_CLAIM_RELEASE,
      lockWaitMs: b.lockWaitMs,
      idleMs: b.idleMs,
      replyMs: b.replyMs,
      statementMs: b.statementMs,
      channel: this.channel,
      global: limits.globalConcurrency,
      ...(rate && !rate.perPartition ? { rateMax: rate.max, rateMs: rate.perMs } : {}),
      partition: limits.partitionConcurrency,
      ...(rate?.perPartition ? { partitionRateMax: rate.max, partitionRateMs: rate.perMs } : {}),
      agingMs: limits.priorityAgingMs ?? null,
      ...(partitioned && this.weights ? { weights: this.weights } : {}),
      ...(limiter
        ? {
            limiter: limiter.name,
            limiterConcurrency: limiter.concurrency,
            ...(limiter.rateLimit ? { limiterRateMax: limiter.rateLimit.max, limiterRateMs: limiter.rateLimit.perMs } : {}),
          }
        : {}),
    });
  }

  /** Wakes the queue's workers on every instance: room freed up that this instance will not take. */
  async announce(db: SqlExecutor, queue: string): Promise<void> {
    await db.$executeRawUnsafe(this.sql.announce, this.channel, queue);
  }
}

/** claim_limited's answer (limited-claim.function.ts). */
interface LimitedClaimRow {
  claimed: string;
  next_due_in_ms: number | null;
  db_now_ms: number;
  paused: boolean | null;
  /** The transaction's isolation level: under another than READ COMMITTED the call did nothing. */
  isolation: string;
  limit_full: boolean | null;
}
