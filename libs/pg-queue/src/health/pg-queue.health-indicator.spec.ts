import type { QueueHealth } from '../worker/worker.orchestrator';
import { findProblems } from './pg-queue.health-indicator';

describe('findProblems: what a health check reports', () => {
  const failing: QueueHealth = {
    database: { up: false, error: 'relation "secret_schema.task" does not exist' },
    listen: 'connected',
    workers: [{ queue: 'q', state: 'running', alive: false, running: 0, lastClaimError: 'password authentication failed for user "app" at db.internal:5432', lastClaimAt: null, paused: false }],
    queues: [],
  };
  const none = () => undefined;

  it('names the database errors by default', () => {
    expect(findProblems(failing, none)).toEqual([
      'database: relation "secret_schema.task" does not exist',
      'worker "q": claims fail: password authentication failed for user "app" at db.internal:5432',
    ]);
  });

  it('names a queue with due tasks and no running handler past maxUnhandledMs, and only then', () => {
    const queue = { due: 2, running: 0, dead: 0, waiting: 0, oldestDueMs: 9000, handlers: 0, paused: false, pausedPartitions: 0, coolingDown: false };
    const health: QueueHealth = {
      database: { up: true, error: null },
      listen: 'connected',
      workers: [],
      queues: [
        { queue: 'typo.queue', ...queue, unhandledMs: 9000 },
        { queue: 'real.queue', ...queue, handlers: 1, unhandledMs: null },
      ],
    };
    expect(findProblems(health, none, true, 5000)).toEqual(['queue "typo.queue": 2 due tasks and no running instance has handled it for 9000 ms (limit 5000)']);
    expect(findProblems(health, none, true, 10_000)).toEqual([]);
    expect(findProblems(health, none)).toEqual([]);
  });

  it('does not call a paused or backed-off queue overdue or unhandled: its tasks wait by design', () => {
    const queue = { due: 2, running: 0, dead: 0, waiting: 0, oldestDueMs: 9000, handlers: 0, unhandledMs: 9000, pausedPartitions: 0, coolingDown: false };
    const health: QueueHealth = {
      database: { up: true, error: null },
      listen: 'connected',
      workers: [],
      queues: [
        { queue: 'paused.queue', ...queue, paused: true },
        { queue: 'backed-off.queue', ...queue, paused: false, coolingDown: true },
        { queue: 'stalled.queue', ...queue, paused: false },
      ],
    };
    expect(findProblems(health, () => 5000, true, 5000)).toEqual([
      'queue "stalled.queue": its oldest due task has waited 9000 ms (limit 5000)',
      'queue "stalled.queue": 2 due tasks and no running instance has handled it for 9000 ms (limit 5000)',
    ]);
  });

  it('without errorText, says what is wrong and nothing the database said', () => {
    expect(findProblems(failing, none, false)).toEqual(['database: down (see the logs)', 'worker "q": claims fail (see the logs)']);
  });
});
