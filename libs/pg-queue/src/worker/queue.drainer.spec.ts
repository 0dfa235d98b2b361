import { DrainTimeoutError } from './queue.drainer';

describe('DrainTimeoutError', () => {
  it('names parked workflows apart from tasks waiting for dependencies', () => {
    const left = { queue: 'order.fulfil', due: 0, running: 1, expired: 0, waiting: 1, parked: 2, unsettled: 0 };
    expect(new DrainTimeoutError(100, [left]).message).toBe(
      'pg-queue: drainQueue: still not quiet after 100 ms: order.fulfil: 1 running, 1 waiting for dependencies, 2 parked workflows (wakeWorkflows ends their sleeps)',
    );
  });
});
