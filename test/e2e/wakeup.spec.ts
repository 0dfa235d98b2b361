import { Injectable } from '@nestjs/common';
import { TaskHandler, WorkerOrchestrator, type Task } from '@app/pg-queue';
import { bootQueueApp, nextEvents, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

const POLL_MS = 30_000;

@Injectable()
class Pong {
  @TaskHandler('wake.ping', { mode: 'lease' })
  async ping(_task: Task) {}
}

describe('LISTEN/NOTIFY wake-up', () => {
  let db: TestDatabase;
  let qa: QueueApp;

  beforeAll(async () => {
    db = await createTestDatabase();
    qa = await bootQueueApp(db.prisma(), [Pong], { databaseUrl: db.url, pollIntervalMs: POLL_MS });
    expect(qa.app.get(WorkerOrchestrator).listening).toBe(true);
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });

  async function timeToStart(): Promise<number> {
    const claimed = nextEvents(qa.queue.events$, (e) => e.type === 'claimed');
    const t0 = Date.now();
    const id = await qa.queue.enqueue('wake.ping', {});
    const [event] = await claimed;
    expect(event.taskId).toBe(id);
    return Date.now() - t0;
  }

  it('an idle worker starts a new task long before the poll interval', async () => {
    const latencies = [];
    for (let i = 0; i < 5; i++) latencies.push(await timeToStart());
    expect(Math.max(...latencies)).toBeLessThan(POLL_MS / 10);
  });

  it('reconnects after the LISTEN connection is killed, and wakes on NOTIFY again', async () => {
    const listener = () => db.sql("SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'pg-queue listener%' AND datname = current_database()");
    const [before] = await listener();
    await db.sql('SELECT pg_terminate_backend($1)', [before.pid]);
    // wait (by condition) for a new listener backend
    const until = Date.now() + 15_000;
    for (;;) {
      const rows = await listener();
      if (rows.length === 1 && rows[0].pid !== before.pid && qa.app.get(WorkerOrchestrator).listening) break;
      if (Date.now() > until) throw new Error('listener did not reconnect');
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(await timeToStart()).toBeLessThan(POLL_MS / 10);
  });
});
