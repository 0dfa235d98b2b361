import { SETTLE_NOTICE } from '../sql/dependencies.sql';
import { ROOM_NOTICE } from '../sql/limits.sql';
import { PAUSE_NOTICE, RESUME_NOTICE } from '../sql/pause.sql';
import { SCHEDULES_NOTICE } from '../sql/schedule.sql';
import { ENDED_NOTICE } from '../sql/watch.sql';
import { WAKE_NOTICE } from '../sql/workflow.sql';
import type { Logger } from '@nestjs/common';
import createPostgresSubscriber, { type Subscriber } from 'pg-listen';

/** What this process does with each notice (see WakeupListener; routed in notice.routes.ts). */
export interface NoticeHandlers {
  /** Tasks of `queue` are due now (null) or at `dueAt`, epoch ms by the database's clock. */
  wake: (queue: string, dueAt: number | null) => void;
  cancel: (taskId: string) => void;
  /** A parent task ended: its dependants are to be told (see DependencySettler). */
  settle: () => void;
  /** Another instance left room in `queue` that a worker here may take (see QueueClaimer.roomNotice). */
  room: (queue: string) => void;
  /** A workflow parked until `at`, epoch ms by the database's clock (see WorkflowWaker). */
  wakeWorkflows: (at: number) => void;
  /** `queue` was paused or resumed as a whole (see PauseWatcher). */
  paused: (queue: string, paused: boolean) => void;
  /** A runtime schedule was created or changed (see ScheduleTicker.wake). */
  schedules: () => void;
  /** Task `id` of `queue` ended, or an attempt of it failed (`state` pending), and someone waits or watches (see watch.sql.ts). */
  ended: (id: string, state: string, queue: string, progress: unknown) => void;
  /** The connection is up (first time, or back): notifications sent while it was down were lost. */
  reconnected: () => void;
  /** The connection was lost. */
  lost?: () => void;
}

/**
 * Holds the one LISTEN connection of this process (Prisma cannot LISTEN) and turns notifications
 * into worker wake-ups. pg-listen reconnects after a dropped connection; since notifications sent
 * while disconnected are lost, every reconnect wakes all workers once. Polling stays on as the
 * fallback either way.
 */
export class WakeupListener {
  private subscriber: Subscriber | null = null;
  private connected = false;
  private subscribing: Promise<void> | null = null;
  private stopped = false;
  /** The connection was lost (or never made) since it last worked: its recovery is logged. */
  private lost = false;
  /** A new connection after LISTEN was refused on a live one (see relisten), and how many in a row. */
  private relistenTimer: NodeJS.Timeout | null = null;
  private relistens = 0;

  constructor(
    private readonly databaseUrl: string,
    private readonly channel: string,
    private readonly logger: Logger,
    private readonly on: NoticeHandlers,
    /**
     * The session's application_name: names the instance (see instance.liveness.ts), so it must
     * reach the server even when databaseUrl sets one of its own.
     */
    private readonly applicationName = 'pg-queue listener',
  ) {}

  /**
   * Payloads: `queue`, `queue@<epoch ms>` (not due yet), `!cancel <task id>`, `!settle`, `!room <queue>`, `!wake@<epoch ms>`,
   * `!pause <queue>`, `!resume <queue>`, `!schedules`, `!ended <id> <state> <queue>`,
   * `!ended <id> progress <queue> <JSON>`.
   */
  private dispatch(payload: string): void {
    if (payload.startsWith('!cancel ')) return this.on.cancel(payload.slice('!cancel '.length));
    if (payload === SETTLE_NOTICE) return this.on.settle();
    if (payload.startsWith(ROOM_NOTICE)) return this.on.room(payload.slice(ROOM_NOTICE.length));
    if (payload.startsWith(WAKE_NOTICE)) return this.on.wakeWorkflows(Number(payload.slice(WAKE_NOTICE.length)));
    if (payload.startsWith(PAUSE_NOTICE)) return this.on.paused(payload.slice(PAUSE_NOTICE.length), true);
    if (payload.startsWith(RESUME_NOTICE)) return this.on.paused(payload.slice(RESUME_NOTICE.length), false);
    if (payload === SCHEDULES_NOTICE) return this.on.schedules();
    if (payload.startsWith(ENDED_NOTICE)) {
      const [id, state, queue, ...progress] = payload.slice(ENDED_NOTICE.length).split(' ');
      return this.on.ended(id, state, queue, progress.length > 0 ? parsedOrText(progress.join(' ')) : undefined);
    }
    const at = payload.lastIndexOf('@');
    if (at < 0) return this.on.wake(payload, null);
    this.on.wake(payload.slice(0, at), Number(payload.slice(at + 1)));
  }

  get isConnected(): boolean {
    return this.connected;
  }

  async start(): Promise<void> {
    const subscriber = createPostgresSubscriber(
      { connectionString: withApplicationName(this.databaseUrl, this.applicationName), keepAlive: true, application_name: this.applicationName },
      {
        parse: (payload: string) => payload,
        // pg-listen's reconnect loop does not look at close(): once stopped, the next retry throws,
        // which ends the loop (else a closed app would keep retrying forever, and keep its process alive).
        retryInterval: (attempt: number) => {
          if (this.stopped || this.subscriber !== subscriber) throw new Error('LISTEN connection closed');
          return Math.min(5000, 100 * 2 ** attempt);
        },
        retryTimeout: Number.POSITIVE_INFINITY,
        paranoidChecking: 30_000,
      },
    );
    this.subscriber = subscriber;
    subscriber.notifications.on(this.channel, (payload: string) => this.dispatch(payload));
    subscriber.events.on('connected', () => {
      // A reconnect attempt that was under way when stop() (or relisten) ran: close what it opened.
      if (this.stopped || this.subscriber !== subscriber) return void subscriber.close().catch(() => undefined);
      this.subscribe(subscriber).catch((err: Error) => this.relisten(subscriber, err));
    });
    subscriber.events.on('reconnect', (attempt: number) => {
      if (this.subscriber !== subscriber && !this.stopped) return; // replaced (see relisten)
      this.connected = false;
      this.lost = true;
      this.on.lost?.();
      if (this.stopped) return;
      this.logger.warn(`LISTEN connection lost; reconnecting (attempt ${attempt}); polling meanwhile`);
    });
    subscriber.events.on('error', (err: Error) => {
      if (this.stopped || this.subscriber !== subscriber) return;
      this.connected = false;
      // pg-listen reports so a LISTEN refused after it reconnected (a standby: 25006), and then
      // keeps that connection: only that needs a new one. Any other error (a connection lost) is
      // pg-listen's own reconnect loop's to handle: a new connection made beside it would delay the
      // wake-ups that loop restores.
      if ((err as { code?: unknown }).code === '25006') this.relisten(subscriber, err);
      else this.logger.error(`LISTEN connection failed: ${err.message}; polling only`);
    });
    let connected = false;
    try {
      await subscriber.connect();
      connected = true;
      await this.subscribe(subscriber);
    } catch (err) {
      this.lost = true;
      // Connected but LISTEN refused: see relisten. Else pg-listen keeps trying to connect in the
      // background, and 'connected' then subscribes.
      if (connected) this.relisten(subscriber, err as Error);
      else this.logger.error(`LISTEN unavailable (${(err as Error).message}); polling until it connects`);
    }
  }

  /**
   * LISTEN was refused on a live connection: a standby not promoted yet behind the database's
   * address ("cannot execute LISTEN during recovery"). pg-listen keeps such a connection and
   * never LISTENs on it again, so that, after the promotion, wake-ups would stay lost (polling
   * only) until the connection dropped. Instead a new connection is made after a pause (backoff
   * with jitter, up to 5 s), until LISTEN works.
   */
  private relisten(subscriber: Subscriber, err: Error): void {
    this.connected = false;
    this.lost = true;
    if (this.stopped || this.subscriber !== subscriber) return;
    this.on.lost?.();
    if (this.relistenTimer) return;
    const ms = Math.min(5000, 200 * 2 ** this.relistens++) * (0.5 + Math.random() / 2);
    this.logger.warn(`LISTEN failed (${err.message}); polling meanwhile, a new LISTEN connection in ${Math.round(ms)} ms`);
    this.relistenTimer = setTimeout(() => {
      this.relistenTimer = null;
      if (this.stopped || this.subscriber !== subscriber || this.connected) return;
      this.subscriber = null; // from now on the old one's reconnects and events are ignored
      void subscriber.close().catch(() => undefined);
      void this.start();
    }, ms);
    this.relistenTimer.unref();
  }

  /**
   * LISTENs on the channel unless this connection already does, then counts as connected (and,
   * if it was not, wakes every worker: notifications sent meanwhile were lost). pg-listen
   * re-LISTENs the channels it knows before it reports a reconnect, but it knows a channel only
   * once listenTo was called: when the first connect failed, that is here, on the late connect.
   * One at a time: the first connect reports 'connected' while start() is still on its way here.
   */
  private subscribe(subscriber: Subscriber): Promise<void> {
    if (!this.subscribing) {
      // (finally runs as a later microtask, so it always clears this very promise)
      const subscribing: Promise<void> = this.listen(subscriber).finally(() => {
        if (this.subscribing === subscribing) this.subscribing = null;
      });
      this.subscribing = subscribing;
    }
    return this.subscribing;
  }

  private async listen(subscriber: Subscriber): Promise<void> {
    if (!subscriber.getSubscribedChannels().includes(this.channel)) await subscriber.listenTo(this.channel);
    if (this.subscriber !== subscriber) return; // stopped meanwhile
    const wasDown = !this.connected;
    this.connected = true;
    this.relistens = 0;
    if (!wasDown) return;
    // At the loss's level, so whoever saw the warning sees the all-clear.
    if (this.lost) this.logger.warn('LISTEN connection back; wake-ups by NOTIFY again');
    this.lost = false;
    this.on.reconnected();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.relistenTimer) clearTimeout(this.relistenTimer);
    const s = this.subscriber;
    this.subscriber = null;
    this.connected = false;
    if (s) await s.close().catch(() => undefined);
  }
}

/**
 * `url` with its application_name parameter set to `name` (pg takes a connection string's
 * parameters over the config's); unchanged if it cannot be parsed as a URL (the listener's name
 * then is whatever it says, and the instance is never judged by it: see InstanceLiveness).
 */
function withApplicationName(url: string, name: string): string {
  try {
    const u = new URL(url);
    u.searchParams.set('application_name', name);
    return u.toString();
  } catch {
    return url;
  }
}

/** A notice's JSON (written by the database from validated JSON), or the text itself should it not parse. */
function parsedOrText(json: string): unknown {
  try {
    return JSON.parse(json);
  } catch {
    return json;
  }
}
