import { Injectable } from '@nestjs/common';
import { TaskHandler, type LeaseTaskContext, type Task } from '@app/pg-queue';
import type { PrismaClient } from '../../src/generated/prisma/client';
import { bootQueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { pause } from '../support/wait-for';

let db: TestDatabase;

@Injectable()
class LimitedHandlers {
  @TaskHandler('after.lease', { mode: 'lease', concurrency: 4, globalConcurrency: 2, timeoutMs: 10_000 })
  async lease(task: Task<{ ms: number }>, ctx: LeaseTaskContext) {
    await new Promise((resolve) => setTimeout(resolve, task.payload.ms));
    void ctx;
  }

  @TaskHandler('after.tx', { concurrency: 3, batchSize: 1, globalConcurrency: 2, timeoutMs: 10_000 })
  async tx(task: Task<{ ms: number }>) {
    await new Promise((resolve) => setTimeout(resolve, task.payload.ms));
  }
}

type Call = { what: string; sql: string; startedAt: number; endedAt: number | null };

/**
 * Statements of the rescuer (its rescue) and of the pruner (a partition step) are held this long,
 * so that shutdown finds a pass of each under way: what the pass does after its statement answers
 * (the rescuer's settling round, the pruner's next statement) then comes after the workers stopped.
 */
const SLOW = [/t\.state = 'running' AND t\.locked_until < now\(\)/, /archive_partition_step\(/];
const SLOW_MS = 250;

/**
 * The client, with every statement and transaction it is asked for recorded (when asked for, and
 * when it ended); the rescuer's and pruner's statements answer SLOW_MS late.
 */
function recording(real: PrismaClient): { client: PrismaClient; calls: Call[] } {
  const calls: Call[] = [];
  const watched = new Set(['$queryRawUnsafe', '$executeRawUnsafe', '$transaction']);
  const client = new Proxy(real, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof prop !== 'string' || !watched.has(prop)) return typeof value === 'function' ? value.bind(target) : value;
      return (...args: unknown[]) => {
        const call: Call = { what: prop, sql: typeof args[0] === 'string' ? args[0].replace(/\s+/g, ' ').slice(0, 100) : '(interactive)', startedAt: Date.now(), endedAt: null };
        calls.push(call);
        const ended = () => (call.endedAt = Date.now());
        const run = () => (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        const slow = typeof args[0] === 'string' && SLOW.some((re) => re.test(args[0] as string));
        const result = slow ? pause(SLOW_MS).then(run) : run();
        Promise.resolve(result).then(ended, ended);
        return result;
      };
    },
  });
  return { client, calls };
}

describe('no work after shutdown (issue 22, item 10)', () => {
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db.drop());

  it('once app.close() resolved, no statement runs or starts: rescuer, pruner, settler and freed-room announces included', async () => {
    const late: string[] = [];
    for (let round = 0; round < 6; round++) {
      const { client, calls } = recording(db.prisma());
      const { queue, close } = await bootQueueApp(client, [LimitedHandlers], {
        pollIntervalMs: 50,
        rescueIntervalMs: 10,
        retention: { intervalMs: 100 },
        shutdownTimeoutMs: 5000,
      });
      for (let i = 0; i < 12; i++) {
        await queue.enqueue('after.lease', { ms: 20 + ((i * 7) % 30) });
        await queue.enqueue('after.tx', { ms: 20 + ((i * 11) % 30) });
      }
      await pause(150 + round * 37);
      await close();
      const closedAt = Date.now();
      await pause(1000);
      for (const c of calls) {
        if (c.startedAt > closedAt) late.push(`round ${round}: ${c.what} started ${c.startedAt - closedAt} ms after close: ${c.sql}`);
        else if (c.endedAt === null || c.endedAt > closedAt) late.push(`round ${round}: ${c.what} still running at close: ${c.sql}`);
      }
      await db.sql('DELETE FROM pgqueue.task');
    }
    expect(late).toEqual([]);
  });
});
