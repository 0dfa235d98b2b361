/**
 * A worker process whose background statements fail (the pause read after a LISTEN reconnect, and
 * the claims) keeps running: each failure is logged and retried, none ends the process as an
 * unhandled rejection, and the work goes on once the statements succeed again. The
 * failure is real: pgqueue.queue_pause is renamed away, so every statement that reads it fails
 * (42P01), then renamed back. The LISTEN session is terminated meanwhile, so the reconnect
 * re-reads the pauses while the table is gone (what a PostgreSQL restart does to that read).
 */
import { killFixtureProcesses, startFixtureProcess, type FixtureProcess } from '../support/fixture-process';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createLedgerTables, queueStates } from '../support/task-ledger';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { pause, waitFor } from '../support/wait-for';

const QUEUE = 'chaos.lease';

describe('failing background statements in a worker process', () => {
  let db: TestDatabase;
  let api: QueueApp;
  let worker: FixtureProcess;

  beforeAll(async () => {
    db = await createTestDatabase();
    api = await bootQueueApp(db.prisma(), [], { autoStart: false }); // installs the schema, enqueues
    await createLedgerTables(db.sql);
  }, 60_000);

  afterAll(async () => {
    await killFixtureProcesses();
    await api?.close();
    await db?.drop();
  });

  it('are logged and retried, the process lives on, and the work resumes once they succeed', async () => {
    worker = startFixtureProcess('chaos-worker', [JSON.stringify({ url: db.url, worker: 'bg', leaseMs: 2000, rescueIntervalMs: 100, workMs: 0 })]);
    await worker.line('READY', 60_000);

    await db.sql('ALTER TABLE pgqueue.queue_pause RENAME TO queue_pause_away');
    try {
      const [{ n }] = await db.sql<{ n: number }>(
        "SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'pg-queue listener%'",
      );
      expect(n).toBe(1);
      await waitFor('the pause read after the reconnect to fail', () => worker.hasExited || /could not read paused queues/.test(worker.output()), { timeoutMs: 30_000 });
      await pause(1000); // time for a rejection nobody handles to end the process
      expect({ exited: worker.hasExited, output: worker.hasExited ? worker.output() : '' }).toEqual({ exited: false, output: '' });
    } finally {
      await db.sql('ALTER TABLE pgqueue.queue_pause_away RENAME TO queue_pause');
    }

    await api.queue.enqueueMany(Array.from({ length: 20 }, (_, n) => ({ queue: QUEUE, payload: { n } })));
    await waitFor(`${QUEUE} to drain`, async () => (await queueStates(db.sql, QUEUE)).done === 20, { timeoutMs: 30_000 });
    expect(worker.hasExited).toBe(false);
  }, 120_000);
});
