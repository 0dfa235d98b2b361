import type { TaskRow } from '../sql/operator.repository';
import type { TaskInfo } from '../types';

/** The statements' snake_case row as the public, camelCase shape. */
export function toTaskInfo(r: TaskRow): TaskInfo {
  return {
    id: r.id,
    queue: r.queue,
    state: r.state,
    payload: r.payload,
    priority: r.priority,
    runAt: r.run_at,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    lastError: r.last_error,
    lockedBy: r.locked_by,
    lockedUntil: r.locked_until,
    parentId: r.parent_id,
    key: r.dedup_key,
    group: r.group_key,
    createdAt: r.created_at,
    startedAt: r.started_at,
    finishedAt: r.finished_at,
    dependsOn: r.depends_on,
    dependants: r.dependants,
    dependenciesLeft: r.state === 'waiting' ? r.deps_left : null,
    result: r.result,
    progress: r.progress ?? null,
  };
}
