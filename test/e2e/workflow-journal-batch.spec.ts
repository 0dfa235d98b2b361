/**
 * The journal writes of calls that end in the same turn of the event loop share one statement
 * (JournalWriter). One workflow's step error whose text jsonb cannot store as such (U+0000, a lone
 * surrogate, one left by a cut) must neither fail the other workflows' entries in that statement
 * nor its own: the error is journaled cleaned, and replays readable.
 */
import { Injectable } from '@nestjs/common';
import { Workflow, type WorkflowContext } from '@app/pg-queue';
import { bootQueueApp, deferred, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

/** Holds every step function until `expected` of them run, so their journal writes end in one turn. */
let barrier = { expected: 0, arrived: 0, all: deferred() };
function arrive(): Promise<void> {
  if (++barrier.arrived === barrier.expected) barrier.all.resolve();
  return barrier.all.promise;
}

/** The error a 'bad' workflow's step throws. */
let badError: () => Error = () => new Error('unset');

@Injectable()
class Batched {
  @Workflow('batch.good', { maxAttempts: 1 })
  async good(_input: unknown, wf: WorkflowContext) {
    return wf.step('one', async () => {
      await arrive();
      return 1;
    });
  }

  /** Catches its step's error, then parks once, so the error is also read back by a replay. */
  @Workflow('batch.bad', { maxAttempts: 1 })
  async bad(_input: unknown, wf: WorkflowContext) {
    let seen: { name: string; message: string } | null = null;
    try {
      await wf.step('throws', async () => {
        await arrive();
        throw badError();
      });
    } catch (err) {
      seen = { name: (err as Error).name, message: (err as Error).message };
    }
    await wf.sleep(300);
    return seen;
  }
}

describe('journal writes batched across workflows', () => {
  let db: TestDatabase;
  let app: QueueApp;

  beforeAll(async () => {
    db = await createTestDatabase();
    app = await bootQueueApp(db.prisma(12), [Batched], { workerId: 'batch-0', databaseUrl: db.url });
  }, 60_000);

  afterAll(async () => {
    await app.close();
    await db.drop();
  });

  async function run(error: () => Error) {
    badError = error;
    barrier = { expected: 6, arrived: 0, all: deferred() };
    const good = await Promise.all([1, 2, 3, 4, 5].map(() => app.queue.enqueue('batch.good', {})));
    const bad = await app.queue.enqueue('batch.bad', {});
    await waitFor('every workflow ended', async () => {
      const states = await Promise.all([...good, bad].map(async (id) => (await app.queue.get(id))!.state));
      return states.every((s) => s === 'done' || s === 'dead') && states;
    });
    for (const id of good) expect(await app.queue.get(id)).toMatchObject({ state: 'done', result: 1, attempt: 1 });
    const stored = await db.sql<{ outcome: string; result: { error: { name: string; message: string } } }>(
      `SELECT outcome, result FROM pgqueue.workflow_step WHERE task_id = $1 AND kind = 'step'`, [bad],
    );
    expect(stored).toHaveLength(1);
    expect(stored[0].outcome).toBe('error');
    const replayed = (await app.queue.get(bad))!;
    expect([replayed.state, replayed.lastError]).toEqual(['done', null]);
    return { stored: stored[0].result.error, replayed: replayed.result as { name: string; message: string } };
  }

  it('an error text with U+0000 fails neither the other entries of its batch nor its own', async () => {
    const { stored, replayed } = await run(() => Object.assign(new Error('bad\u0000byte'), { name: 'Odd\u0000Error' }));
    expect(stored).toEqual({ name: 'OddError', message: 'badbyte' });
    expect(replayed).toEqual({ name: 'OddError', message: 'badbyte' });
  }, 60_000);

  it('an error text with a lone surrogate, or a pair at the cut, is stored well-formed', async () => {
    // A pair astride the old 4000-character cut, and a lone surrogate of the text's own.
    const { stored, replayed } = await run(() => new Error(`a\uD800b${'x'.repeat(3995)}\u{1F600}tail`));
    expect(stored.message.startsWith('a\uFFFDb')).toBe(true);
    expect(stored.message).not.toMatch(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/);
    expect(replayed.message).toBe(stored.message);
  }, 60_000);
});
