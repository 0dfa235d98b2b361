import type { RegisteredHandler } from '../discovery/task-handler.registry';
import { DEFAULT_HANDLER_OPTIONS } from '../pg-queue.options';
import { connectionBudget } from './connection.budget';

const handler = (queue: string, mode: 'transactional' | 'lease', concurrency: number) =>
  ({ queue, name: queue, options: { ...DEFAULT_HANDLER_OPTIONS, mode, concurrency }, handle: async () => undefined, schedule: null, workflow: false }) as RegisteredHandler;

describe('connectionBudget', () => {
  const handlers = [handler('a', 'transactional', 10), handler('b', 'transactional', 4), handler('c', 'lease', 50)];

  it('counts transactional slots, a claim per queue, a completion per lease queue and one for maintenance', () => {
    const b = connectionBudget(handlers, true, { poolMax: 20, serverMax: 97, serverInUse: 5 });
    expect(b).toEqual({ poolNeeds: 10 + 4 + 3 + 1 + 1, serverNeeds: 21, refusal: null, warning: null });
  });

  it('warns when the work will wait for the pool, naming the numbers to change', () => {
    const b = connectionBudget(handlers, true, { poolMax: 10, serverMax: 97, serverInUse: 5 });
    expect(b.refusal).toBeNull();
    expect(b.warning).toMatch(/can use 19 pool connections at once \(14 transactional slots, 3 claims, 1 lease-mode completions, 1 for maintenance\) but the Prisma pool's max is 10: .* Raise the pool's max to 19/);
  });

  it('refuses a pool the server cannot accept', () => {
    const b = connectionBudget(handlers, true, { poolMax: 400, serverMax: 297, serverInUse: 5 });
    expect(b.refusal).toBe(
      "this process alone needs 401 connections (a Prisma pool of 400 and LISTEN) but the server accepts 297 (max_connections minus superuser_reserved_connections): lower the pool's max or raise max_connections",
    );
  });

  it('warns when the server has fewer free connections than the process may open', () => {
    expect(connectionBudget(handlers, false, { poolMax: 20, serverMax: 100, serverInUse: 90 }).warning).toMatch(/may open 20 connections, and the server has 10 free now/);
  });
});
