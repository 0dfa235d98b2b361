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
 * This instance's record in instance_session: written each time its LISTEN connection is (back)
 * up, so that once that session is gone for `graceMs` the other instances take it for dead and
 * take back its claims (see liveness.sql.ts); deleted at shutdown. A registration that failed is
 * retried on the rescuer's next pass while LISTEN is up.
 */
export class InstanceLiveness {
  /** Recorded since the LISTEN connection last came up. */
  private registered = false;
  private registering: Promise<void> | null = null;
  private retired = false;
  /** Said once that the server showed no session of this name (a pooler or the URL renamed it). */
  private toldUnseen = false;

  constructor(
    private readonly db: SqlExecutor,
    private readonly repo: LivenessRepository,
    private readonly instance: string,
    readonly listener: string,
    private readonly graceMs: number,
    private readonly logger: Logger,
  ) {}

  /** The LISTEN connection is (back) up: record it. Never throws. */
  connected(): Promise<void> {
    this.registered = false;
    return this.register();
  }

  /** The LISTEN connection is down: the next connect registers anew. */
  lost(): void {
    this.registered = false;
  }

  /** The rescuer's pass: register if the last attempt failed while LISTEN is up. */
  async ensure(listening: boolean): Promise<void> {
    if (listening && !this.registered) await this.register();
  }

  private register(): Promise<void> {
    this.registering ??= (async () => {
      if (this.retired) return;
      try {
        const seen = await this.repo.register(this.db, this.instance, this.listener, this.graceMs);
        if (this.retired) return void (await this.repo.retire(this.db, this.instance).catch(() => undefined));
        this.registered = seen;
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
    await this.registering;
    try {
      await this.repo.retire(this.db, this.instance);
    } catch (err) {
      this.logger.warn(`could not remove this instance's LISTEN session record: ${(err as Error).message}`);
    }
  }
}
