import { batchTransactionFull, MAX_SAVEPOINTS, TX_BUDGET_MS } from './transactional.runner';

describe('batchTransactionFull: when a batch transaction stops starting tasks', () => {
  const at = (over: Partial<Parameters<typeof batchTransactionFull>[0]>) => batchTransactionFull({ ran: 1, elapsedMs: 0, savepoints: 0, stopping: false, ...over });

  it('stops at 48 savepoints however little time has passed', () => {
    expect(MAX_SAVEPOINTS).toBe(48);
    expect([at({ savepoints: 47 }), at({ savepoints: 48 })]).toEqual([false, true]);
  });

  it('stops past its time budget, or when the worker is stopping', () => {
    expect([at({ elapsedMs: TX_BUDGET_MS }), at({ elapsedMs: TX_BUDGET_MS + 1 }), at({ stopping: true })]).toEqual([false, true, true]);
  });

  it('always runs the first task', () => {
    expect(at({ ran: 0, savepoints: 100, elapsedMs: 10_000, stopping: true })).toBe(false);
  });
});
