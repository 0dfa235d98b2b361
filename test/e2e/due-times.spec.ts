import { Injectable } from '@nestjs/common';
import { TaskHandler, type Task, type TaskContext } from '@app/pg-queue';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import type { Prisma } from '../../src/generated/prisma/client';
import { bootQueueApp, deferred, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

// Far beyond every wait below: a task that starts on time was started by a due-time timer, not by a poll.
const POLL_MS = 120_000;
/** Generous for a noisy 2-core machine; the defect this guards against is a wait for the poll. */
const LATE_MS = 1000;

/** Records, by the database's clock, how late each run started after the task's due time. */
@Injectable()
class DueHandlers {
  lateness = new Map<string, ReturnType<typeof deferred<number>>>();
  failFirst = new Set<string>();

  expect(key: string) {
    const d = deferred<number>();
    this.lateness.set(key, d);
    return d.promise;
  }

  @TaskHandler('due.tx', { backoff: { type: 'fixed', delayMs: 700 } })
  async run(task: Task<{ key: string }>, ctx: TaskContext<Prisma.TransactionClient>) {
    const [{ late }] = await ctx.tx.$queryRawUnsafe<{ late: number }[]>(
      'SELECT (extract(epoch FROM clock_timestamp() - run_at) * 1000)::float8 AS late FROM pgqueue.task WHERE id = $1::bigint',
      task.id,
    );
    if (this.failFirst.delete(task.payload.key)) throw new Error('first attempt fails');
    this.lateness.get(task.payload.key)?.resolve(late);
  }
}

function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: not started within ${ms} ms`)), ms)));
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

describe('delayed tasks and retries start on time, whatever the poll interval and the app clock (issue 12 item 4)', () => {
  let db: TestDatabase;
  let worker: QueueApp;
  let handlers: DueHandlers;

  beforeAll(async () => {
    db = await createTestDatabase();
    worker = await bootQueueApp(db.prisma(), [DueHandlers], { databaseUrl: db.url, pollIntervalMs: POLL_MS, listenPollIntervalMs: POLL_MS });
    handlers = worker.app.get(DueHandlers);
  });
  afterAll(async () => {
    jest.restoreAllMocks();
    await worker.close();
    await db.drop();
  });
  afterEach(() => jest.restoreAllMocks());

  it.each([0, 2000, -2000])('with the app clock off by %i ms, two delayed tasks enqueued apart both start on time', async (skewMs) => {
    const realNow = Date.now.bind(Date);
    jest.spyOn(Date, 'now').mockImplementation(() => realNow() + skewMs);
    // Let a claim measure the clock first, as a running worker's claims always have: wait for it to
    // run, or the notice of the task below may be timed with the clock measured before the step.
    const warm = handlers.expect(`warm${skewMs}`);
    await worker.queue.enqueue('due.tx', { key: `warm${skewMs}` });
    await within(10_000, warm, 'warm-up');
    const first = handlers.expect(`a${skewMs}`);
    const second = handlers.expect(`b${skewMs}`);
    await worker.queue.enqueue('due.tx', { key: `a${skewMs}` }, { delayMs: 800 });
    await worker.queue.enqueue('due.tx', { key: `b${skewMs}` }, { delayMs: 1600 });
    expect(await within(10_000, first, 'first')).toBeLessThan(LATE_MS);
    expect(await within(10_000, second, 'second')).toBeLessThan(LATE_MS);
  });

  it('a retry starts on time on an idle worker', async () => {
    handlers.failFirst.add('retry');
    const started = handlers.expect('retry');
    await worker.queue.enqueue('due.tx', { key: 'retry' });
    expect(await within(10_000, started, 'retry')).toBeLessThan(LATE_MS);
  });

  it('a retry recorded by another instance starts on time here (the failure is announced)', async () => {
    // The other instance records a failure through the same statement its worker uses.
    const [{ id }] = await db.sql<{ id: string }>(`INSERT INTO pgqueue.task (queue, payload, state, attempt, lease_token, locked_until)
      VALUES ('due.tx', '{"key":"elsewhere"}', 'running', 1, gen_random_uuid(), now() + interval '1 minute') RETURNING id::text`);
    const [{ token }] = await db.sql<{ token: string }>('SELECT lease_token::text AS token FROM pgqueue.task WHERE id = $1', [id]);
    const started = handlers.expect('elsewhere');
    const other = new TaskRepository('pgqueue', 'archive');
    const prisma = db.prisma(1);
    await other.fail(prisma, [{ id, token, error: 'failed elsewhere', delayMs: 700, fatal: false }]);
    expect(await within(10_000, started, 'retry from elsewhere')).toBeLessThan(LATE_MS);
  });

  it('a task delayed by months is accepted and waits', async () => {
    const id = await worker.queue.enqueue('due.tx', { key: 'months' }, { delayMs: 90 * 86_400_000 });
    const marker = handlers.expect('marker');
    await worker.queue.enqueue('due.tx', { key: 'marker' }); // a claim has run after it
    await within(10_000, marker, 'marker');
    expect(await worker.queue.get(id)).toMatchObject({ state: 'pending', attempt: 0 });
  });
});
