import { createHash } from 'node:crypto';
import type { Logger } from '@nestjs/common';
import type { LivenessRepository } from '../sql/liveness.repository';
import type { SqlExecutor } from '../types';

/**
 * The application_name of an instance's LISTEN session: names the instance (schema and workerId,
 * hashed to fit the server's 63 bytes) so that other instances can tell from pg_stat_activity
 * whether its session still exists (see liveness.sql.ts).
 */
export function listenerName(schema: string, workerId: string): string {
  return `pg-queue listener ${createHash('sha1').update(`${schema}\0${workerId}`).digest('hex').slice(0, 24)}`;
}

/**
 * While its LISTEN connection is down, an instance says every `reconnectingEveryMs(silentMs)` that
 * it is alive (a quarter of its window, at most a second; RECONNECTING_RETRY_MS after a failed
 * attempt, so that it says so soon after the database is back), each time for RECONNECTING_FOR_MS
 * or its window if longer: a process that dies then is judged once that runs out.
 */
export const RECONNECTING_RETRY_MS = 250;
export const RECONNECTING_FOR_MS = 10_000;
export const reconnectingEveryMs = (silentMs: number): number => Math.min(1000, Math.max(50, Math.floor(silentMs / 4)));
/**
 * A judge whose own LISTEN connection was lost applies the others' silent window only once it
 * has been back this long: a restart or a failover ends every session at once, and the others'
 * reconnects (pg-listen retries up to 5 s apart) or first words through their pools may come
 * later than its own. Until then it applies their grace. A process that never lost its LISTEN
 * connection (one started to replace a dead one) is trusted from its first registration.
 */
export const TRUSTED_AFTER_MS = 6000;
/** The grace written for judges that cannot tell a reconnect (older versions, untrusted ones). */
export const GRACE_FLOOR_MS = 10_000;

/**
 * This instance's record in instance_session: written each time its LISTEN connection is (back)
 * up, so that once that session is gone for `silentMs` while this instance says nothing, the
 * other instances take it for dead and take back its claims (see liveness.sql.ts); deleted at
 * shutdown. While LISTEN is down it says, through the pool, that it is reconnecting. A
 * registration that failed is retried on the rescuer's next pass while LISTEN is up.
 * Each lost(), connected() and retire() starts a new epoch: a registration or a say begun in an
 * older one changes nothing after it.
 */
export class InstanceLiveness {
  private epoch = 0;
  /** Recorded in this epoch, and when (Date.now()); null while not. */
  private registeredAt: number | null = null;
  /** Its LISTEN connection was lost at least once. */
  private everLost = false;
  /** The registration under way (the next one waits for it). */
  private registering: Promise<void> | null = null;
  /** The epoch whose says are scheduled (null: not saying), the next one's timer, the one under way. */
  private sayingEpoch: number | null = null;
  private sayTimer: NodeJS.Timeout | null = null;
  private sayInFlight: Promise<void> | null = null;
  private retired = false;
  /** Said once that the server showed no session of this name (a pooler or the URL renamed it). */
  private toldUnseen = false;
  private toldSayFailed = false;

  constructor(
    private readonly db: SqlExecutor,
    private readonly repo: LivenessRepository,
    private readonly instance: string,
    readonly listener: string,
    private readonly silentMs: number,
    private readonly logger: Logger,
  ) {}

  /** The LISTEN connection is (back) up: stop saying it reconnects, and record it. Never throws. */
  connected(): Promise<void> {
    this.newEpoch();
    return this.register();
  }

  /**
   * The LISTEN connection is down: say so now and again until it is back. pg-listen reports each
   * reconnect attempt: only the first starts saying.
   */
  lost(): void {
    if (this.retired || this.sayingEpoch === this.epoch) return;
    this.newEpoch();
    this.everLost = true;
    this.sayingEpoch = this.epoch;
    this.sayInFlight = this.say(this.epoch);
  }

  /** Whether this instance's own view of the others' sessions is trusted (see TRUSTED_AFTER_MS). */
  trusted(): boolean {
    return this.registeredAt !== null && (!this.everLost || Date.now() - this.registeredAt >= TRUSTED_AFTER_MS);
  }

  /** The rescuer's pass: register if the last attempt failed (or found no session) while LISTEN is up. */
  async ensure(listening: boolean): Promise<void> {
    if (this.registering) return this.registering;
    if (listening && this.registeredAt === null && this.sayingEpoch === null) await this.register();
  }

  /** At shutdown: forget this instance (its claims were released, or wait for their leases). */
  async retire(): Promise<void> {
    this.retired = true;
    this.newEpoch();
    await Promise.all([this.registering, this.sayInFlight]);
    try {
      await this.repo.retire(this.db, this.instance);
    } catch (err) {
      this.logger.warn(`could not remove this instance's LISTEN session record: ${(err as Error).message}`);
    }
  }

  /** Ends the epoch: no say is scheduled after this, and what is under way applies nothing. */
  private newEpoch(): void {
    this.epoch++;
    this.registeredAt = null;
    this.sayingEpoch = null;
    if (this.sayTimer) clearTimeout(this.sayTimer);
    this.sayTimer = null;
  }

  /** One "reconnecting" through the pool, then the next one scheduled while the epoch lasts. */
  private async say(epoch: number): Promise<void> {
    let nextMs = reconnectingEveryMs(this.silentMs);
    try {
      await this.repo.reconnecting(this.db, this.instance, RECONNECTING_FOR_MS);
      this.toldSayFailed = false;
    } catch (err) {
      nextMs = RECONNECTING_RETRY_MS;
      if (!this.toldSayFailed) {
        this.toldSayFailed = true;
        this.logger.warn(`could not say that this instance is reconnecting (retrying): ${(err as Error).message}`);
      }
    }
    if (epoch !== this.epoch) return;
    this.sayTimer = setTimeout(() => (this.sayInFlight = this.say(epoch)), nextMs);
    this.sayTimer.unref();
  }

  /** A registration after the one under way and the last say (which it must follow, to clear it). */
  private register(): Promise<void> {
    const epoch = this.epoch;
    const previous = Promise.all([this.registering, this.sayInFlight]);
    const run = previous.then(async () => {
      if (this.retired || epoch !== this.epoch) return;
      try {
        const since = Date.now();
        const seen = await this.repo.register(this.db, this.instance, this.listener, { graceMs: Math.max(GRACE_FLOOR_MS, this.silentMs), silentMs: this.silentMs });
        if (this.retired) return void (await this.repo.retire(this.db, this.instance).catch(() => undefined));
        if (epoch !== this.epoch) return;
        if (seen) this.registeredAt = since;
        else if (!this.toldUnseen) {
          this.toldUnseen = true;
          this.logger.warn(
            `the LISTEN session's application_name "${this.listener}" does not show in pg_stat_activity (renamed by databaseUrl or a pooler, or another server): if this instance dies, its claims wait for their leases`,
          );
        }
      } catch (err) {
        this.logger.warn(`could not record this instance's LISTEN session (retried on the next rescue pass): ${(err as Error).message}`);
      }
    });
    const registering: Promise<void> = run.finally(() => {
      if (this.registering === registering) this.registering = null;
    });
    this.registering = registering;
    return registering;
  }
}
