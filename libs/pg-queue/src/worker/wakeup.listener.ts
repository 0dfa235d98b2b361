import type { Logger } from '@nestjs/common';
import createPostgresSubscriber, { type Subscriber } from 'pg-listen';

/**
 * Holds the one LISTEN connection of this process (Prisma cannot LISTEN) and turns notifications
 * into worker wake-ups. pg-listen reconnects after a dropped connection; since notifications sent
 * while disconnected are lost, every reconnect wakes all workers once. Polling stays on as the
 * fallback either way.
 */
export class WakeupListener {
  private subscriber: Subscriber | null = null;
  private connected = false;

  constructor(
    private readonly databaseUrl: string,
    private readonly channel: string,
    private readonly logger: Logger,
    private readonly on: {
      /** Tasks of `queue` are due now (null) or at `dueAt`, epoch ms by the database's clock. */
      wake: (queue: string, dueAt: number | null) => void;
      cancel: (taskId: string) => void;
      reconnected: () => void;
    },
  ) {}

  /** Payloads: `queue`, `queue@<epoch ms>` (not due yet), `!cancel <task id>`. */
  private dispatch(payload: string): void {
    if (payload.startsWith('!cancel ')) return this.on.cancel(payload.slice('!cancel '.length));
    const at = payload.lastIndexOf('@');
    if (at < 0) return this.on.wake(payload, null);
    this.on.wake(payload.slice(0, at), Number(payload.slice(at + 1)));
  }

  get isConnected(): boolean {
    return this.connected;
  }

  async start(): Promise<void> {
    const subscriber = createPostgresSubscriber(
      { connectionString: this.databaseUrl, keepAlive: true, application_name: 'pg-queue listener' },
      {
        parse: (payload: string) => payload,
        retryInterval: (attempt: number) => Math.min(5000, 100 * 2 ** attempt),
        retryTimeout: Number.POSITIVE_INFINITY,
        paranoidChecking: 30_000,
      },
    );
    this.subscriber = subscriber;
    subscriber.notifications.on(this.channel, (payload: string) => this.dispatch(payload));
    subscriber.events.on('connected', () => {
      const wasDown = !this.connected;
      this.connected = true;
      if (wasDown) this.on.reconnected();
    });
    subscriber.events.on('reconnect', (attempt: number) => {
      this.connected = false;
      this.logger.warn(`LISTEN connection lost; reconnecting (attempt ${attempt}); polling meanwhile`);
    });
    subscriber.events.on('error', (err: Error) => {
      this.connected = false;
      this.logger.error(`LISTEN connection failed: ${err.message}; polling only`);
    });
    try {
      await subscriber.connect();
      await subscriber.listenTo(this.channel);
      this.connected = true;
    } catch (err) {
      this.logger.error(`LISTEN unavailable (${(err as Error).message}); falling back to polling`);
    }
  }

  async stop(): Promise<void> {
    const s = this.subscriber;
    this.subscriber = null;
    this.connected = false;
    if (s) await s.close().catch(() => undefined);
  }
}
