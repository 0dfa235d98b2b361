import { randomUUID } from 'node:crypto';
import { Observable, type Subscription } from 'rxjs';
import { InvalidArgumentError, TaskFailedError, TaskNotFoundError, WaitForTimeoutError } from '../errors';
import { validateQueueName } from '../core/task-input';
import { filterObject, shown } from './arguments';
import type { TaskNotices } from '../observability/task-notices';
import type { OperatorRepository } from '../sql/operator.repository';
import type { WatchRepository } from '../sql/watch.repository';
import type { PrismaClientLike } from '../types';

/** What waitFor and watch need (TaskQueue's parts). */
export interface WaiterDeps {
  prisma: PrismaClientLike;
  operator: OperatorRepository;
  watch: WatchRepository;
  notices: TaskNotices;
}

/** An event of the cross-process stream (`TaskQueue.watch`). */
export interface WatchedTaskEvent {
  /**
   * completed: ended done; failed: an attempt failed and will be retried; dead, cancelled: ended
   * so; progress: its attempt reported `progress` (ctx.progress, as written: at most once a second).
   */
  type: 'completed' | 'failed' | 'dead' | 'cancelled' | 'progress';
  taskId: string;
  queue: string;
  /** The value reported, for a `progress` event. */
  progress?: unknown;
}

export type WaitForOptions = { timeoutMs?: number };
export type WatchFilter = { queue?: string | string[] };

/** waitFor's timeout: an integer of ms in [1, 2^31 - 1] (setTimeout's range); 30 s by default. */
export function waitTimeout(options: unknown): number {
  filterObject(options, ['timeoutMs']);
  const ms = (options as WaitForOptions).timeoutMs ?? 30_000;
  if (typeof ms !== 'number' || !Number.isInteger(ms) || ms < 1 || ms > 2 ** 31 - 1) {
    throw new InvalidArgumentError('timeoutMs', `expected an integer of ms from 1 to ${2 ** 31 - 1}, got ${shown(ms)}`);
  }
  return ms;
}

/** watch's queues: null for every queue. */
export function watchedQueues(filter: unknown): string[] | null {
  filterObject(filter, ['queue']);
  const { queue } = filter as WatchFilter;
  if (queue === undefined) return null;
  return (Array.isArray(queue) ? queue : [queue]).map((q) => validateQueueName(q));
}

/**
 * How long a stream's row in task_watch lives without a refresh: a process that dies leaves its
 * queues' completions notifying for at most this long. Refreshed every third of it.
 */
const WATCH_TTL_MS = 60_000;

/**
 * Resolves with task `id`'s result once it ends done, rejects with TaskFailedError when it ends
 * dead or cancelled, WaitForTimeoutError after `timeoutMs`, TaskNotFoundError when there is no such
 * task. Woken by the `!ended` notice (see watch.sql.ts for why none is lost: LISTEN first, then
 * the mark, then one read), and reads the state again after a LISTEN reconnect; no polling.
 */
export function waitForTask(d: WaiterDeps, id: string, timeoutMs: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    let over = false;
    let armed = false;
    let reading = false;
    let again = false;
    /** A notice said the task ended done: a row gone since was deleted at its end (finished: 'delete'). */
    let endedDone = false;
    const subs: Subscription[] = [];
    const end = (settle: () => void) => {
      if (over) return;
      over = true;
      clearTimeout(timer);
      for (const s of subs) s.unsubscribe();
      settle();
    };
    const timer = setTimeout(() => end(() => reject(new WaitForTimeoutError(id, timeoutMs))), timeoutMs);
    const read = async () => {
      const row = await d.operator.get(d.prisma, id);
      if (row === null) return end(() => (endedDone ? resolve(undefined) : reject(new TaskNotFoundError(id))));
      if (row.state === 'done') return end(() => resolve(row.result ?? undefined));
      if (row.state === 'dead' || row.state === 'cancelled') return end(() => reject(new TaskFailedError(id, row.state as 'dead' | 'cancelled', row.last_error)));
    };
    // One read at a time; a notice during a read asks for one more.
    const check = () => {
      if (!armed || over) return;
      if (reading) return void (again = true);
      reading = true;
      read()
        .catch((err: unknown) => end(() => reject(err)))
        .finally(() => {
          reading = false;
          if (again) {
            again = false;
            check();
          }
        });
    };
    subs.push(
      d.notices.ended$.subscribe((n) => {
        if (n.id !== id || n.state === 'progress') return;
        if (n.state === 'done') endedDone = true;
        check();
      }),
      d.notices.reconnected$.subscribe(check),
    );
    (async () => {
      await d.notices.ready(() => over);
      if (over) return;
      await d.watch.mark(d.prisma, id);
      armed = true;
      check();
    })().catch((err: unknown) => end(() => reject(err)));
  });
}

/**
 * The ends and failed attempts of the tasks of `queues` (null: every queue), whichever process
 * ran them, for as long as the Observable is subscribed (see watch.sql.ts). Events from before the
 * subscription's row is written are not seen; delivery is NOTIFY's: at most once, none while this
 * process's LISTEN connection is down.
 */
export function watchTasks(d: WaiterDeps, queues: string[] | null): Observable<WatchedTaskEvent> {
  return new Observable<WatchedTaskEvent>((subscriber) => {
    const name = randomUUID();
    let stopped = false;
    let refresh: NodeJS.Timeout | undefined;
    const inner = d.notices.ended$.subscribe((n) => {
      if (queues !== null && !queues.includes(n.queue)) return;
      if (n.state === 'progress') return subscriber.next({ type: 'progress', taskId: n.id, queue: n.queue, progress: n.progress });
      const type = n.state === 'done' ? 'completed' : n.state === 'pending' ? 'failed' : (n.state as 'dead' | 'cancelled');
      subscriber.next({ type, taskId: n.id, queue: n.queue });
    });
    const register = () => d.watch.subscribe(d.prisma, name, queues ?? [''], WATCH_TTL_MS);
    const forget = () => void d.watch.unsubscribe(d.prisma, name).catch(() => undefined);
    (async () => {
      await d.notices.ready(() => stopped);
      if (stopped) return;
      await register();
      // Unsubscribed while the row was being written: take it back.
      if (stopped) return forget();
      // A refresh that fails leaves the row until its TTL; the next one may succeed.
      refresh = setInterval(() => void register().catch(() => undefined), WATCH_TTL_MS / 3);
      refresh.unref();
    })().catch((err: unknown) => subscriber.error(err));
    return () => {
      stopped = true;
      clearInterval(refresh);
      inner.unsubscribe();
      forget();
    };
  });
}
