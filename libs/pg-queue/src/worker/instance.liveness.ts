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
 * While its LISTEN connection is down, an instance says every RECONNECTING_EVERY_MS that it is
 * alive, for RECONNECTING_FOR_MS (RECONNECTING_RETRY_MS after a failed attempt, so that it says
 * so soon after the database is back): a process that dies then is judged once that runs out.
 */
export const RECONNECTING_EVERY_MS = 1000;
export const RECONNECTING_RETRY_MS = 250;
export const RECONNECTING_FOR_MS = 10_000;
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
 */
export class InstanceLiveness {
  /** Recorded since the LISTEN connection last came up. */
  private registered = false;
  /** When it was last recorded (Date.now()), or null while not. */
  private registeredAt: number | null = null;
  /** Its LISTEN connection was lost at least once. */
  private everLost = false;
  private registering: Promise<void> | null = null;
  private retired = false;
  /** Said once that the server showed no session of this name (a pooler or the URL renamed it). */
  private toldUnseen = false;
  /** Saying it is reconnecting (LISTEN down), every RECONNECTING_EVERY_MS: the next time. */
  private saying = false;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private toldReconnectFailed = false;

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
    this.stopReconnecting();
    this.registered = false;
    this.registeredAt = null;
    return this.register();
  }

  /** The LISTEN connection is down: say so now and every second until it is back; the next connect registers anew. */
  lost(): void {
    this.registered = false;
    this.registeredAt = null;
    this.everLost = true;
    if (this.saying || this.retired) return;
    this.saying = true;
    void this.sayReconnecting();
  }

  /** Whether this instance's own view of the others' sessions is trusted (see TRUSTED_AFTER_MS). */
  trusted(): boolean {
    return this.registeredAt !== null && (!this.everLost || Date.now() - this.registeredAt >= TRUSTED_AFTER_MS);
  }

  /** One "reconnecting" through the pool, then the next one scheduled, until stopReconnecting(). */
  private async sayReconnecting(): Promise<void> {
    let nextMs = RECONNECTING_EVERY_MS;
    try {
      await this.repo.reconnecting(this.db, this.instance, RECONNECTING_FOR_MS);
      this.toldReconnectFailed = false;
    } catch (err) {
      nextMs = RECONNECTING_RETRY_MS;
      if (!this.toldReconnectFailed) {
        this.toldReconnectFailed = true;
        this.logger.warn(`could not say that this instance is reconnecting (retrying): ${(err as Error).message}`);
      }
    }
    if (!this.saying) return;
    this.reconnectTimer = setTimeout(() => void this.sayReconnecting(), nextMs);
    this.reconnectTimer.unref();
  }

  private stopReconnecting(): void {
    this.saying = false;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
  }

  /** The rescuer's pass: register if the last attempt failed while LISTEN is up. */
  async ensure(listening: boolean): Promise<void> {
    if (listening && !this.registered) await this.register();
  }

  private register(): Promise<void> {
    this.registering ??= (async () => {
      if (this.retired) return;
      try {
        const since = Date.now();
        const seen = await this.repo.register(this.db, this.instance, this.listener, { graceMs: Math.max(GRACE_FLOOR_MS, this.silentMs), silentMs: this.silentMs });
        if (this.retired) return void (await this.repo.retire(this.db, this.instance).catch(() => undefined));
        this.registered = seen;
        if (seen) this.registeredAt = since;
        if (!seen && !this.toldUnseen) {
          this.toldUnseen = true;
          this.logger.warn(
            `the LISTEN session's application_name "${this.listener}" does not show in pg_stat_activity (renamed by databaseUrl or a pooler, or another server): if this instance dies, its claims wait for their leases`,
          );
        }
      } catch (err) {
        this.logger.warn(`could not record this instance's LISTEN session (retried on the next rescue pass): ${(err as Error).message}`);
      }
    })().finally(() => (this.registering = null));
    return this.registering;
  }

  /** At shutdown: forget this instance (its claims were released, or wait for their leases). */
  async retire(): Promise<void> {
    this.retired = true;
    this.stopReconnecting();
    await this.registering;
    try {
      await this.repo.retire(this.db, this.instance);
    } catch (err) {
      this.logger.warn(`could not remove this instance's LISTEN session record: ${(err as Error).message}`);
    }
  }
}
