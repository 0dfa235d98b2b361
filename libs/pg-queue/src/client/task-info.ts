import type { Cooldown } from '../sql/backoff.repository';
import type { QueuePause } from '../sql/pause.repository';
import type { QueueStats } from '../types';

/** stats(): the counts by queue and state, with the pauses and cooldowns (a paused or cooling-down queue shows even with no tasks). */
export function statsByQueue(rows: { queue: string; state: string; count: number; oldest_due_ms: number | null }[], pauses: QueuePause[], cooldowns: Cooldown[] = []): QueueStats[] {
  const byQueue = new Map<string, QueueStats>();
  const of = (queue: string): QueueStats => {
    let s = byQueue.get(queue);
    if (!s) {
      s = { queue, pending: 0, waiting: 0, running: 0, dead: 0, done: 0, cancelled: 0, oldestDueMs: null, oldestPendingMs: null, paused: false, pausedPartitions: [], cooldownUntil: null, cooldownPartitions: [], backedOffUntil: null, backedOffPartitions: [] };
      s.backedOffPartitions = s.cooldownPartitions;
      byQueue.set(queue, s);
    }
    return s;
  };
  for (const r of rows) {
    const s = of(r.queue);
    s[r.state as 'pending'] += r.count;
    if (r.oldest_due_ms !== null) s.oldestDueMs = s.oldestPendingMs = Math.max(s.oldestDueMs ?? 0, r.oldest_due_ms);
  }
  // A paused queue shows even when it has no tasks.
  for (const p of pauses) {
    if (p.partition === null) of(p.queue).paused = true;
    else of(p.queue).pausedPartitions.push(p.partition);
  }
  for (const b of cooldowns) {
    if (b.scope === 'queue') of(b.name).cooldownUntil = of(b.name).backedOffUntil = b.until;
    else if (b.scope === 'partition') of(b.name).cooldownPartitions.push({ partition: b.partition ?? '', until: b.until });
  }
  return [...byQueue.values()].sort((a, b) => a.queue.localeCompare(b.queue));
}
