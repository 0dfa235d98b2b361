import type { TaskEvents } from '../observability/task-events';
import type { ScheduleTicker } from '../schedules/schedule.ticker';
import type { WorkflowSupport } from '../workflow/workflow.support';
import type { DatabaseClock } from './database.clock';
import type { DependencySettler } from './dependency.settler';
import type { InstanceLiveness } from './instance.liveness';
import type { PauseWatcher } from './pause.watcher';
import type { NoticeHandlers } from './wakeup.listener';
import type { WorkerSet } from './worker.set';

/** The parts of this process a LISTEN notice reaches; those started later are read when a notice comes. */
export interface NoticeTargets {
  workers: WorkerSet;
  clock: DatabaseClock;
  settler: DependencySettler;
  workflows: WorkflowSupport;
  events: TaskEvents;
  liveness: InstanceLiveness | null;
  /** Writes what is owed (see OwedOutcomes) through the app's client. */
  settleOwed: () => void;
  pauses: () => PauseWatcher | null;
  ticker: () => ScheduleTicker | null;
}

/** Routes each notice of the LISTEN connection (see WakeupListener) to the part it concerns. */
export function routeNotices(t: NoticeTargets): NoticeHandlers {
  return {
    wake: (queue, dueAt) => t.workers.find(queue)?.wakeIn(dueAt === null ? 0 : t.clock.msUntil(dueAt)),
    cancel: (taskId) => t.workers.cancel(taskId),
    settle: () => void t.settler.request(),
    room: (queue) => t.workers.find(queue)?.roomFreed(),
    wakeWorkflows: (at) => t.workflows.wakeAt(at),
    paused: (queue, paused) => t.pauses()?.notice(queue, paused),
    schedules: () => t.ticker()?.wake(),
    ended: (id, state, queue, progress) => t.events.notices.ended({ id, state, queue, progress }),
    reconnected: () => {
      t.events.notices.reconnected();
      t.pauses()?.refresh();
      t.ticker()?.wake();
      t.workers.wakeAll();
      void t.liveness?.connected();
      // Back after a failover or a cut: what ended here meanwhile goes back at once.
      t.settleOwed();
    },
    lost: () => t.liveness?.lost(),
  };
}
