/**
 * A limited lease queue claims only for its free slots (no look-ahead: a claimed task holds a slot
 * of its rule). Slots free in bursts (a claim's tasks end together), and the worker claims once
 * for the burst: before, the first freed slot got a claim of its own while the rest waited for it,
 * so claims alternated between 1 task and concurrency - 1 (half the tasks per claim, twice the
 * claims, each a transaction under the queue's lock).
 */
import { Injectable } from '@nestjs/common';
import { TaskHandler, WorkerOrchestrator } from '@app/pg-queue';
import { LimitsRepository } from '../../libs/pg-queue/src/sql/limits.repository';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { queueStates } from '../support/task-ledger';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

const CONCURRENCY = 10;
const TASKS = 200;

@Injectable()
class NoOp {
  @TaskHandler('lcs.rate', { mode: 'lease', concurrency: CONCURRENCY, rateLimit: { max: 100_000, perMs: 1000 } })
  async run(): Promise<void> {}
}

describe('a limited lease queue', () => {
  let db: TestDatabase;
  let qa: QueueApp | null = null;

  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await qa?.close();
    await db.drop();
  });

  it('claims the slots a burst of endings frees in one claim, not one slot first', async () => {
    qa = await bootQueueApp(db.prisma(), [NoOp], { autoStart: false });
    await qa.queue.enqueueMany(Array.from({ length: TASKS }, (_, n) => ({ queue: 'lcs.rate', payload: { n } })));
    const wants: number[] = [];
    const claim = LimitsRepository.prototype.claim;
    const spy = jest.spyOn(LimitsRepository.prototype, 'claim').mockImplementation(function (this: LimitsRepository, ...args) {
      wants.push(args[2]);
      return claim.apply(this, args);
    });
    try {
      await qa.app.get(WorkerOrchestrator).start();
      await waitFor('the drain', async () => (await queueStates(db.sql, 'lcs.rate')).done === TASKS, { timeoutMs: 30_000 });
    } finally {
      spy.mockRestore();
    }
    // Claims for a single slot: only where a handler ended on its own (none here: every task is a no-op).
    const single = wants.filter((w) => w === 1).length;
    console.log(`limited claim size: ${wants.length} claims for ${TASKS} tasks; wants ${JSON.stringify(wants.slice(0, 12))}…`);
    expect({ claims: wants.length <= TASKS / CONCURRENCY + 5, single: single <= 2 }).toEqual({ claims: true, single: true });
  }, 60_000);
});
