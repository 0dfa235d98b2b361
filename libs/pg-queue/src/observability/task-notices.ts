import { Subject, type Observable } from 'rxjs';
import { PgQueueError } from '../errors';

/**
 * A task's end (or failed attempt, `state` pending; or a progress value its attempt reported,
 * `state` progress, with `progress`) told by another process or this one (see watch.sql.ts).
 */
export interface EndedNotice {
  id: string;
  state: string;
  queue: string;
  progress?: unknown;
}

/** How the notices reach this process: the orchestrator's LISTEN connection. */
export interface NoticeSource {
  /** Whether there can be a LISTEN connection at all (databaseUrl set). */
  readonly available: boolean;
  /** Starts it if need be (resolves once it is up, or retries in the background). */
  listen(): Promise<void>;
  connected(): boolean;
}

/**
 * The cross-process half of TaskEvents: `!ended` notifications as they arrive on the one LISTEN
 * connection of this process (WakeupListener), and its reconnects (notices sent meanwhile were
 * lost: whoever waits reads the state again). The worker layer publishes, the client subscribes;
 * neither imports the other.
 */
export class TaskNotices {
  private readonly endedSubject = new Subject<EndedNotice>();
  private readonly reconnectedSubject = new Subject<void>();
  readonly ended$: Observable<EndedNotice> = this.endedSubject.asObservable();
  readonly reconnected$: Observable<void> = this.reconnectedSubject.asObservable();
  private source: NoticeSource | null = null;

  attach(source: NoticeSource): void {
    this.source = source;
  }

  ended(notice: EndedNotice): void {
    this.endedSubject.next(notice);
  }

  reconnected(): void {
    this.reconnectedSubject.next();
  }

  /**
   * Resolves once the LISTEN connection is up (or `stop()` says the caller gave up): only then may
   * a waiter read the state it waits on, or a notice could pass unseen between the read and the LISTEN.
   */
  async ready(stop: () => boolean): Promise<void> {
    const source = this.source;
    if (!source?.available) throw new PgQueueError('pg-queue: waiting on tasks of other processes needs the LISTEN connection: set the module option databaseUrl');
    await source.listen();
    // Down (reconnecting): wait for its return, checking now and then that the caller still waits.
    while (!source.connected() && !stop()) {
      await new Promise<void>((resolve) => {
        const sub = this.reconnectedSubject.subscribe(() => done());
        const timer = setTimeout(() => done(), 250);
        const done = () => {
          clearTimeout(timer);
          sub.unsubscribe();
          resolve();
        };
      });
    }
  }
}
