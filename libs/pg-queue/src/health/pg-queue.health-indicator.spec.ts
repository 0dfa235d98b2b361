import type { QueueHealth } from '../worker/worker.orchestrator';
import { findProblems } from './pg-queue.health-indicator';

describe('findProblems: what a health check reports', () => {
  const failing: QueueHealth = {
    database: { up: false, error: 'relation "secret_schema.task" does not exist' },
    listen: 'connected',
    workers: [{ queue: 'q', state: 'running', alive: false, running: 0, lastClaimError: 'password authentication failed for user "app" at db.internal:5432', lastClaimAt: null }],
    queues: [],
  };
  const none = () => undefined;

  it('names the database errors by default', () => {
    expect(findProblems(failing, none)).toEqual([
      'database: relation "secret_schema.task" does not exist',
      'worker "q": claims fail: password authentication failed for user "app" at db.internal:5432',
    ]);
  });

  it('without errorText, says what is wrong and nothing the database said', () => {
    expect(findProblems(failing, none, false)).toEqual(['database: down (see the logs)', 'worker "q": claims fail (see the logs)']);
  });
});
