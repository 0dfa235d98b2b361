import { Injectable } from '@nestjs/common';
import { TaskHandler, type LeaseTaskContext, type Task, type TaskContext } from '@app/pg-queue';
import { DrainTimeoutError, drainQueue } from '@app/pg-queue/testing';
import type { Prisma } from '../../src/generated/prisma/client';
import { bootQueueApp, deferred } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

@Injectable()
class Orders {
  @TaskHandler('helpers.confirm')
  async confirm(task: Task<{ customer: string }>, ctx: TaskContext<Prisma.TransactionClient>) {
    await ctx.tx.order.create({ data: { customer: task.payload.customer, amountCents: 1 } });
    await ctx.enqueue('helpers.notify', task.payload);
  }

  @TaskHandler('helpers.notify', { mode: 'lease' })
  async notify() {}
}

/**
 * Registered before the queues that feed them (the providers below list this class first): a
 * drain round reaches these queues before the work that enqueues into them has run.
 */
@Injectable()
class FlowEnds {
  readonly joined: number[] = [];
  readonly ended: number[] = [];

  @TaskHandler('drainflow.join')
  async join(task: Task<{ round: number }>) {
    this.joined.push(task.payload.round);
  }

  @TaskHandler('drainflow.chain3', { mode: 'lease' })
  async chain3(task: Task<{ round: number }>) {
    this.ended.push(task.payload.round);
  }
}

@Injectable()
class FlowMiddles {
  @TaskHandler('drainflow.part', { mode: 'lease' })
  async part(task: Task<{ n: number }>) {
    return task.payload.n;
  }

  @TaskHandler('drainflow.chain2')
  async chain2(task: Task<{ round: number }>, ctx: TaskContext) {
    await ctx.enqueue('drainflow.chain3', task.payload);
  }
}

@Injectable()
class FlowStarts {
  @TaskHandler('drainflow.split', { mode: 'lease' })
  async split(task: Task<{ round: number }>, ctx: LeaseTaskContext) {
    const parts = [];
    for (let n = 0; n < 3; n++) parts.push(await ctx.enqueue('drainflow.part', { n }));
    await ctx.enqueue('drainflow.join', task.payload, { dependsOn: parts });
  }

  @TaskHandler('drainflow.chain1')
  async chain1(task: Task<{ round: number }>, ctx: TaskContext) {
    await ctx.enqueue('drainflow.chain2', task.payload);
  }
}

/** Fails its first two attempts; the backoff alone would keep the retries an hour away. */
@Injectable()
class Flaky {
  @TaskHandler('drainretry.flaky', { maxAttempts: 5, backoff: { type: 'fixed', delayMs: 3_600_000, jitter: false } })
  async flaky(task: Task<unknown>) {
    if (task.attempt <= 2) throw new Error(`attempt ${task.attempt} fails`);
  }

  @TaskHandler('drainretry.later', { mode: 'lease' })
  async later() {}
}

const holding = { started: deferred(), release: deferred() };

@Injectable()
class Holder {
  @TaskHandler('drainwait.hold', { mode: 'lease' })
  async hold() {
    holding.started.resolve();
    await holding.release.promise;
  }
}

describe('drainQueue', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db.drop());

  // With autoStart, the app's own worker races drainQueue for every task: its claim may be
  // committed but not yet handed to a runner when drainQueue looks. drainQueue must wait for it.
  it('with workers running (autoStart), returns only once the task and its follow-ups are finished', async () => {
    const qa = await bootQueueApp(db.prisma(), [Orders], { databaseUrl: db.url });
    try {
      for (let i = 0; i < 40; i++) {
        const customer = `drain-${i}`;
        await qa.queue.enqueue('helpers.confirm', { customer });
        await drainQueue(qa.app);
        expect(await db.sql('SELECT count(*)::int AS n FROM orders WHERE customer = $1', [customer])).toEqual([{ n: 1 }]);
        expect(await db.sql("SELECT count(*)::int AS n FROM pgqueue.task WHERE queue LIKE 'helpers.%'")).toEqual([{ n: 0 }]);
      }
    } finally {
      await qa.close();
    }
  });

  // The app's workers may have claimed (or finished) a parent before drainQueue looks: the round
  // that finds nothing to claim must still wait for it, then reach its join and its follow-ups in
  // queues the round had already passed.
  it.each([true, false])('autoStart %s: joins and follow-ups in queues registered before their parents run before it returns', async (autoStart) => {
    const qa = await bootQueueApp(db.prisma(), [FlowEnds, FlowMiddles, FlowStarts], { databaseUrl: db.url, autoStart });
    const ends = qa.app.get(FlowEnds);
    const rounds = 40;
    const unfinished: { round: number; left: unknown[]; joined: boolean; ended: boolean }[] = [];
    try {
      for (let round = 0; round < rounds; round++) {
        await qa.queue.enqueueMany([
          { queue: 'drainflow.split', payload: { round } },
          { queue: 'drainflow.chain1', payload: { round } },
        ]);
        await drainQueue(qa.app);
        const left = await db.sql("SELECT queue, state FROM pgqueue.task WHERE queue LIKE 'drainflow.%' ORDER BY queue");
        const joined = ends.joined.includes(round);
        const ended = ends.ended.includes(round);
        if (left.length > 0 || !joined || !ended) {
          unfinished.push({ round, left, joined, ended });
          // The next round starts from a quiet queue (the workers, if started, finish the rest).
          if (autoStart) await waitForQuiet(db, 'drainflow.%');
          else await drainQueue(qa.app);
        }
      }
      expect({ rounds, unfinished }).toEqual({ rounds, unfinished: [] });
    } finally {
      await qa.close();
    }
  });

  it('without workers, runs the tasks inline and counts the attempts', async () => {
    const qa = await bootQueueApp(db.prisma(), [Orders], { autoStart: false });
    try {
      await qa.queue.enqueueMany(Array.from({ length: 5 }, (_, i) => ({ queue: 'helpers.confirm', payload: { customer: `inline-${i}` } })));
      expect(await drainQueue(qa.app)).toBe(10); // five confirmations, five notifications
      expect(await db.sql("SELECT count(*)::int AS n FROM orders WHERE customer LIKE 'inline-%'")).toEqual([{ n: 5 }]);
    } finally {
      await qa.close();
    }
  });

  it.each([true, false])('autoStart %s: runDelayed runs retries and delayed tasks now, without waiting out their backoff', async (autoStart) => {
    const qa = await bootQueueApp(db.prisma(), [Flaky], { databaseUrl: db.url, autoStart });
    try {
      const id = await qa.queue.enqueue('drainretry.flaky', {});
      const later = await qa.queue.enqueue('drainretry.later', {}, { delayMs: 3_600_000 });
      // Without the option, the retry stays an hour away.
      await drainQueue(qa.app, 'drainretry.flaky');
      expect(await qa.queue.get(id)).toMatchObject({ state: 'pending', attempt: 1, lastError: expect.stringContaining('attempt 1 fails') });
      expect(await qa.queue.get(later)).toMatchObject({ state: 'pending', attempt: 0 });

      const report = await drainQueue(qa.app, { runDelayed: true });
      expect(await qa.queue.get(id)).toMatchObject({ state: 'done', attempt: 3 });
      expect(await qa.queue.get(later)).toMatchObject({ state: 'done', attempt: 1 });
      expect(report.ran).toBeGreaterThanOrEqual(autoStart ? 0 : 3); // two retries and the delayed task
    } finally {
      await qa.close();
    }
  });

  it('reports the queues with due tasks that no handler of the app handles', async () => {
    const qa = await bootQueueApp(db.prisma(), [Flaky], { autoStart: false });
    try {
      await qa.queue.enqueueMany([
        { queue: 'drainnobody.a', payload: {} },
        { queue: 'drainnobody.a', payload: {} },
        { queue: 'drainnobody.b', payload: {}, options: { delayMs: 3_600_000 } },
        { queue: 'drainretry.later', payload: {} },
      ]);
      const report = await drainQueue(qa.app, {});
      expect(report.ran).toBe(1);
      expect(report.undrained.filter((u) => u.queue.startsWith('drainnobody.'))).toEqual([{ queue: 'drainnobody.a', pending: 2 }]);
      // runDelayed counts the delayed ones too (it does not run them: no handler here).
      const delayed = await drainQueue(qa.app, { runDelayed: true });
      expect(delayed.undrained.filter((u) => u.queue.startsWith('drainnobody.'))).toEqual([
        { queue: 'drainnobody.a', pending: 2 },
        { queue: 'drainnobody.b', pending: 1 },
      ]);
      expect(await db.sql("SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = 'drainnobody.b' AND run_at > now()")).toEqual([{ n: 1 }]);
      // Naming a queue asks about that queue only.
      expect((await drainQueue(qa.app, { queue: 'drainretry.later' })).undrained).toEqual([]);
    } finally {
      await qa.close();
    }
  });

  it('waits for what this app runs, not for what another instance runs, and says what is left when it times out', async () => {
    const a = await bootQueueApp(db.prisma(), [Holder], { autoStart: false });
    const b = await bootQueueApp(db.prisma(), [Holder], { autoStart: false });
    try {
      const id = await a.queue.enqueue('drainwait.hold', {});
      const err = drainQueue(a.app, { queue: 'drainwait.hold', timeoutMs: 300 }).catch((e: unknown) => e);
      await holding.started.promise; // instance a runs it and holds it
      expect(await err).toBeInstanceOf(DrainTimeoutError);
      expect(((await err) as Error).message).toMatch(/drainQueue: still not quiet after 300 ms: drainwait\.hold: 1 running$/);
      // Another instance's drain does not wait for it (its handler may be a stand-in that never ends).
      expect(await drainQueue(b.app, { queue: 'drainwait.hold' })).toEqual({ ran: 0, undrained: [] });
      expect(await a.queue.get(id)).toMatchObject({ state: 'running' });
      // The next drain of a waits for the attempt the first one started, and counts it.
      const again = drainQueue(a.app, 'drainwait.hold');
      holding.release.resolve();
      expect(await again).toBe(1);
      expect(await a.queue.get(id)).toMatchObject({ state: 'done' });
    } finally {
      holding.release.resolve();
      await a.close();
      await b.close();
    }
  });
});

/** Waits until no task of the queues matching `pattern` is left in the hot table. */
async function waitForQuiet(db: TestDatabase, pattern: string): Promise<void> {
  const until = Date.now() + 30_000;
  while ((await db.sql('SELECT count(*)::int AS n FROM pgqueue.task WHERE queue LIKE $1', [pattern]))[0].n > 0) {
    if (Date.now() > until) throw new Error(`tasks of ${pattern} still left after 30 s`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
