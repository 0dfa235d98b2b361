/**
 * Ordinary program shapes that workflows must replay (the named cases of the defects the
 * generated-program checker, test/workflow-checker/, looks for in general): concurrent branches of
 * several calls, a catch that logs and rethrows or wraps, a deploy or a timeout in the middle of a
 * step of a saga, a step that hangs beside a sleep, a journal write or a park that meets a dropped
 * connection.
 */
import { Injectable } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import { Client } from 'pg';
import { PrismaClient } from '../../src/generated/prisma/client';
import { Workflow, type WorkflowContext } from '@app/pg-queue';
import { bootQueueApp, deferred, type QueueApp } from '../support/queue-app';
import { holdTaskRow, longestLockWait } from '../support/held-task-row';
import { StallProxy } from '../support/stall-proxy';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { pause, waitFor } from '../support/wait-for';

/** Runs of each outside call, by `${workflowId}:${name}`. */
const runs = new Map<string, number>();
const ran = (wf: WorkflowContext, name: string) => {
  const n = (runs.get(`${wf.workflowId}:${name}`) ?? 0) + 1;
  runs.set(`${wf.workflowId}:${name}`, n);
  return n;
};
const later = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => (clearTimeout(timer), reject(signal.reason)), { once: true });
  });
/** What the next run of `hang` waits for (a step that hangs until it is given up). */
let hangMs = 0;
let proxy: StallProxy;
let gate = deferred();
const LONG_NAME = `payment-confirmed-${'x'.repeat(300)}`;

@Injectable()
class Shapes {
  /** Branch 1's first call ends last: the first run journals b-0 before a-0's branch goes on. */
  @Workflow('shape.branches')
  async branches(_: unknown, wf: WorkflowContext) {
    const parts = await Promise.all(
      [40, 0].map(async (ms, i) => {
        const fetched = await wf.step(`fetch-${i}`, () => later(ms).then(() => `f${i}`));
        const stored = await wf.step(`store-${i}`, () => `s${i}`);
        return `${fetched}${stored}`;
      }),
    );
    await wf.sleep(10);
    return parts;
  }

  @Workflow('shape.rethrow', { maxAttempts: 3, backoff: { type: 'fixed', delayMs: 10 } })
  async rethrow(_: unknown, wf: WorkflowContext) {
    try {
      await wf.step('flaky', () => {
        if (ran(wf, 'flaky') === 1) throw new Error('first run fails');
        return 'ok';
      });
    } catch (err) {
      await wf.step('log', () => void ran(wf, 'log'));
      throw err;
    }
    return wf.step('after', () => 'after');
  }

  /** A branch parks first; the other then fails, and its catch's call never returns (the run parked). */
  @Workflow('shape.fail-beside-park', { maxAttempts: 3, backoff: { type: 'fixed', delayMs: 10 } })
  async failBesidePark(_: unknown, wf: WorkflowContext) {
    const [got] = await Promise.all([
      wf.waitForSignal<string>('ok'),
      (async () => {
        try {
          await wf.step('reserve', async () => {
            await later(50);
            if (ran(wf, 'reserve') === 1) throw new Error('first run fails');
          });
        } catch (err) {
          await wf.step('log', () => undefined);
          throw err;
        }
      })(),
    ]);
    return got;
  }

  /** A transaction whose own statement always passes its statement_timeout. */
  @Workflow('shape.slow-transaction', { maxAttempts: 2, backoff: { type: 'fixed', delayMs: 10 } })
  async slowTransaction(_: unknown, wf: WorkflowContext) {
    await wf.transaction('slow', async (tx) => {
      await tx.$executeRawUnsafe("SET LOCAL statement_timeout = '20ms'");
      await tx.$queryRawUnsafe('SELECT pg_sleep(1)');
    });
  }

  @Workflow('shape.wrap', { maxAttempts: 3, backoff: { type: 'fixed', delayMs: 10 } })
  async wrap(_: unknown, wf: WorkflowContext) {
    try {
      return await wf.step('flaky', () => {
        if (ran(wf, 'flaky') === 1) throw new Error('first run fails');
        return 'ok';
      });
    } catch (err) {
      throw new Error(`could not: ${(err as Error).message}`); // no cause
    }
  }

  /** A saga: a step that honours wf.signal, compensated only if it really fails. */
  @Workflow('shape.saga', { maxAttempts: 3, backoff: { type: 'fixed', delayMs: 10 }, timeoutMs: 1000, leaseMs: 2000 })
  async saga(_: unknown, wf: WorkflowContext) {
    try {
      await wf.step('charge', async () => {
        ran(wf, 'charge');
        const ms = hangMs;
        hangMs = 0;
        await later(ms, wf.signal); // as fetch(url, { signal }) does
        return 'charged';
      });
      return 'charged';
    } catch {
      await wf.step('refund', () => void ran(wf, 'refund'));
      return 'compensated';
    }
  }

  /** A step in its retry back-off during a shutdown. */
  @Workflow('shape.backoff-saga', { maxAttempts: 3, backoff: { type: 'fixed', delayMs: 10 }, leaseMs: 2000 })
  async backoffSaga(_: unknown, wf: WorkflowContext) {
    try {
      await wf.step(
        'charge',
        () => {
          if (ran(wf, 'charge') === 1) throw new Error('busy, try again');
          return 'charged';
        },
        { maxAttempts: 2, backoff: { type: 'fixed', delayMs: 3000 } },
      );
      return 'charged';
    } catch {
      await wf.step('refund', () => void ran(wf, 'refund'));
      return 'compensated';
    }
  }

  @Workflow('shape.hang-beside-sleep', { maxAttempts: 2, backoff: { type: 'fixed', delayMs: 10 }, timeoutMs: 1000 })
  async hangBesideSleep(_: unknown, wf: WorkflowContext) {
    await Promise.all([wf.step('slow', () => (ran(wf, 'slow') === 1 ? later(4000) : undefined)), wf.sleep(10)]);
    return 'done';
  }

  @Workflow('shape.park-drop', { maxAttempts: 1, leaseMs: 2000 })
  async parkDrop(_: unknown, wf: WorkflowContext) {
    return wf.waitForSignal<string>('go');
  }

  @Workflow('shape.wait')
  async wait(_: unknown, wf: WorkflowContext) {
    return wf.waitForSignal<string>('paid');
  }

  /** A wait that times out, then one on a long signal name. */
  @Workflow('shape.timed-wait')
  async timedWait(_: unknown, wf: WorkflowContext) {
    const none = await wf.waitForSignal('never', { timeoutMs: 50 });
    const long = await wf.waitForSignal<string>(LONG_NAME);
    return [none, long];
  }

  @Workflow('shape.gated-wait')
  async gatedWait(_: unknown, wf: WorkflowContext) {
    await wf.step('gate', () => (ran(wf, 'gate'), gate.promise));
    return wf.waitForSignal('go');
  }

  /** The step's value reaches the journal over a connection that drops (see the test). */
  @Workflow('shape.lost-write', { maxAttempts: 3, backoff: { type: 'fixed', delayMs: 10 } })
  async lostWrite(_: unknown, wf: WorkflowContext) {
    try {
      await wf.step('charge', () => {
        if (ran(wf, 'charge') === 1) {
          proxy.refuse(); // the journal write that follows meets no connection
          setTimeout(() => proxy.admit(), 500);
        }
        return 'charged';
      });
      return 'charged';
    } catch {
      await wf.step('refund', () => void ran(wf, 'refund'));
      return 'compensated';
    }
  }
}

describe('workflow shapes', () => {
  let db: TestDatabase;
  let a: QueueApp;

  beforeAll(async () => {
    db = await createTestDatabase();
    proxy = new StallProxy(Number(new URL(db.url).port));
    await proxy.start();
    a = await bootQueueApp(db.prisma(10), [Shapes], { workerId: 'shapes-a', databaseUrl: db.url, shutdownTimeoutMs: 200 });
  }, 60_000);

  afterAll(async () => {
    await a?.close();
    proxy.admit();
    await proxy?.close();
    await db?.drop();
  });

  const ended = async (id: string, timeoutMs = 20_000) =>
    waitFor(`workflow ${id} ended`, async () => {
      const t = await a.queue.get(id);
      return t && ['done', 'dead', 'cancelled'].includes(t.state) ? t : null;
    }, { timeoutMs });

  it('concurrent branches of two calls each replay after a park, whatever order they ended in', async () => {
    const id = await a.queue.enqueue('shape.branches', {});
    const t = await ended(id);
    expect([t.state, t.lastError]).toEqual(['done', null]);
    expect(t.result).toEqual(['f0s0', 'f1s1']);
  });

  it('a catch that runs a logging step and rethrows: retried, and done once the step succeeds', async () => {
    const id = await a.queue.enqueue('shape.rethrow', {});
    const t = await ended(id);
    expect([t.state, t.result, t.attempt]).toEqual(['done', 'after', 2]);
    expect([runs.get(`${id}:flaky`), runs.get(`${id}:log`)]).toEqual([2, 1]);
  });

  it('a step that fails beside a park (Promise.all) is retried once the workflow wakes, not replayed as failed for ever', async () => {
    const id = await a.queue.enqueue('shape.fail-beside-park', {});
    await waitFor('parked on its signal', async () => (await a.queue.get(id))?.state === 'waiting' && runs.get(`${id}:reserve`) === 1);
    await a.queue.signal(id, 'ok', 'yes');
    const t = await ended(id);
    expect([t.state, t.result]).toEqual(['done', 'yes']);
    expect(runs.get(`${id}:reserve`)).toBe(2);
  });

  it("a transaction's own statement timeout is its failure, counted: the workflow ends dead after its attempts, not given back for ever", async () => {
    const id = await a.queue.enqueue('shape.slow-transaction', {});
    const t = await ended(id, 15_000);
    expect([t.state, t.attempt]).toEqual(['dead', 2]);
    expect(t.lastError).toMatch(/statement timeout/);
  });

  it('a catch that throws another error (no cause): the step runs again on the next attempt', async () => {
    const id = await a.queue.enqueue('shape.wrap', {});
    const t = await ended(id);
    expect([t.state, t.result, t.attempt]).toEqual(['done', 'ok', 2]);
  });

  // A business transaction holds each workflow's row while its attempt is given up (it enqueued a
  // task that depends on it): the attempt's outcome waits for the row, the step's journal write
  // does not (it only shares the row), so a journaled abort would be there first to be replayed.
  it('a timeout in the middle of a step that honours wf.signal does not make the saga compensate', async () => {
    hangMs = 5000;
    const id = await a.queue.enqueue('shape.saga', {});
    await waitFor('the step under way', () => runs.get(`${id}:charge`) === 1);
    await holdTaskRow(db.prisma(2), a.queue, id, 2000);
    const t = await ended(id);
    expect([t.state, t.result]).toEqual(['done', 'charged']);
    expect([runs.get(`${id}:charge`), runs.get(`${id}:refund`)]).toEqual([2, undefined]);
  });

  it('a shutdown in the middle of a step, or of its retry back-off, does not make the saga compensate', async () => {
    const old = await bootQueueApp(db.prisma(6), [Shapes], { workerId: 'shapes-old', databaseUrl: db.url, shutdownTimeoutMs: 200 });
    await a.close(); // only `old` runs them, until it shuts down
    hangMs = 60_000;
    const honours = await old.queue.enqueue('shape.saga', {});
    const backingOff = await old.queue.enqueue('shape.backoff-saga', {});
    await waitFor('both steps under way', () => runs.get(`${honours}:charge`) === 1 && runs.get(`${backingOff}:charge`) === 1);
    await pause(100);
    const business = db.prisma(4);
    await holdTaskRow(business, old.queue, honours, 1500);
    await holdTaskRow(business, old.queue, backingOff, 1500);
    await old.close(); // the deploy: its attempts are given up mid-step (their rows held: back by their leases' end)
    a = await bootQueueApp(db.prisma(10), [Shapes], { workerId: 'shapes-new', databaseUrl: db.url, shutdownTimeoutMs: 200, rescueIntervalMs: 200 });
    for (const id of [honours, backingOff]) {
      const t = await ended(id);
      expect([id, t.state, t.result]).toEqual([id, 'done', 'charged']);
      expect(runs.get(`${id}:refund`)).toBeUndefined();
    }
  }, 40_000);

  it('a cancel that races a park always ends the workflow', async () => {
    gate = deferred();
    const id = await a.queue.enqueue('shape.gated-wait', {});
    await waitFor('the gate step under way', () => runs.get(`${id}:gate`) === 1);
    // A transaction holds the row for 800 ms: the park waits for it with a snapshot from before the
    // cancel below, which reads the task running and commits a request meanwhile.
    const holder = new Client({ connectionString: db.url });
    await holder.connect();
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM pgqueue.task WHERE id = $1 FOR NO KEY UPDATE', [id]);
    const released = pause(800).then(() => holder.query('COMMIT')).finally(() => holder.end());
    gate.resolve();
    await waitFor('the park waiting for the row', async () => (await db.sql(`SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%WITH parked AS%'`)).length > 0, { everyMs: 20 });
    expect(['requested', 'cancelled']).toContain(await a.queue.cancel(id));
    await released;
    const t = await ended(id, 10_000);
    expect(t.state).toBe('cancelled');
  });

  it('a signal sent early inside a long business transaction: the workflow parks without spinning or waiting on a lock, and wakes at the commit', async () => {
    const claims: number[] = [];
    const sub = a.queue.events$.subscribe((e) => e.queue === 'shape.wait' && e.type === 'claimed' && claims.push(Date.now()));
    try {
      const business = db.prisma(2);
      const id = await a.queue.enqueue('shape.wait', {});
      let committedAt = 0;
      const sending = business.$transaction(async (tx) => {
        await a.queue.signal(id, 'paid', 'p', { tx });
        await pause(4000);
        committedAt = Date.now();
      }, { timeout: 20_000 });
      const waits = await longestLockWait((text) => db.sql(text), 3500);
      await sending;
      const t = await ended(id, 10_000);
      expect([t.state, t.result]).toEqual(['done', 'p']);
      // One claim before the commit (it parks at once, as waiting), one after (woken by the commit).
      expect(claims.filter((at) => at < committedAt)).toHaveLength(1);
      expect(claims.length).toBe(2);
      expect(waits).toBeLessThan(500);
    } finally {
      sub.unsubscribe();
    }
  }, 30_000);

  it('a signal wait that timed out says so; a signal name of up to 512 characters can be sent as it can be waited for', async () => {
    const id = await a.queue.enqueue('shape.timed-wait', {});
    await waitFor('the second wait parked', async () => (await a.queue.get(id))?.workflow?.waitingFor?.name === LONG_NAME);
    await a.queue.signal(id, LONG_NAME, 'paid');
    const t = await ended(id);
    expect([t.state, t.result]).toEqual(['done', [null, 'paid']]);
    expect(t.workflow!.steps.map((s) => [s.kind, s.outcome, s.timedOut])).toEqual([['signal', 'ok', true], ['signal', 'ok', false]]);
  });

  it("the handler's timeout bounds a step that hangs beside a sleep", async () => {
    const id = await a.queue.enqueue('shape.hang-beside-sleep', {});
    await waitFor('the slow step started', () => runs.get(`${id}:slow`) === 1);
    const startedAt = Date.now();
    // At 1 s the attempt times out: it fails, and the next one runs (the step returns at 4 s).
    const t = await ended(id, 10_000);
    expect([t.state, t.result, t.attempt]).toEqual(['done', 'done', 2]);
    expect(Date.now() - startedAt).toBeLessThan(3500);
  });
});

describe('workflow shapes through a dropped connection', () => {
  let db: TestDatabase;
  let app: QueueApp;

  beforeAll(async () => {
    db = await createTestDatabase();
    proxy = new StallProxy(Number(new URL(db.url).port));
    await proxy.start();
    app = await bootQueueApp(db.prisma(10), [], { autoStart: false });
  }, 60_000);

  afterAll(async () => {
    proxy.admit();
    await proxy?.close();
    await db?.drop();
  });

  it("a step whose journal write meets a dropped connection is run again, never journaled as failed", async () => {
    const viaProxy = new PrismaClient({ adapter: new PrismaPg({ connectionString: proxy.url(db.url), max: 6 }) });
    const worker = await bootQueueApp(viaProxy, [Shapes], { workerId: 'shapes-proxy', databaseUrl: db.url, shutdownTimeoutMs: 200 });
    try {
      const id = await app.queue.enqueue('shape.lost-write', {});
      const t = await waitFor('the workflow ended', async () => {
        const got = await app.queue.get(id);
        return got && ['done', 'dead'].includes(got.state) ? got : null;
      });
      expect([t.state, t.result]).toEqual(['done', 'charged']);
      expect(runs.get(`${id}:refund`)).toBeUndefined();
      expect(t.attempt).toBe(1); // given back uncounted
    } finally {
      await worker.close();
      await viaProxy.$disconnect();
    }
  });

  it('a park that meets a dropped connection costs no attempt: a workflow of one attempt still takes its signal', async () => {
    const viaProxy = new PrismaClient({ adapter: new PrismaPg({ connectionString: proxy.url(db.url), max: 6 }) });
    const worker = await bootQueueApp(viaProxy, [Shapes], { workerId: 'shapes-park', databaseUrl: db.url, shutdownTimeoutMs: 200, rescueIntervalMs: 200 });
    try {
      const dropped = proxy.refuseOn('waiting_for = CASE'); // the park statement: never reaches the server
      const id = await app.queue.enqueue('shape.park-drop', {});
      await dropped;
      setTimeout(() => proxy.admit(), 300);
      await waitFor('the workflow parked', async () => (await app.queue.get(id))?.state === 'waiting', { timeoutMs: 15_000 });
      await app.queue.signal(id, 'go', 'went');
      const t = await waitFor('the workflow ended', async () => {
        const got = await app.queue.get(id);
        return got && ['done', 'dead'].includes(got.state) ? got : null;
      });
      expect([t.state, t.result, t.lastError]).toEqual(['done', 'went', null]);
    } finally {
      await worker.close();
      await viaProxy.$disconnect();
    }
  }, 40_000);
});
