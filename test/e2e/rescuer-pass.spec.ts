/**
 * The rescuer's periodic pass is the safety net for dependency debts and workflow children's ends
 * whose `!settle` notification nobody heard. An idle instance's pass probes for them in its rescue
 * statement and sends no settle statement when there is nothing to settle (issue 42's idle cost);
 * debts that are there are settled by the next pass. Handler presence, on the same interval, is
 * one statement (the runtime function handler_pass, with JIT off) instead of a transaction of four.
 */
import { Injectable } from '@nestjs/common';
import { TaskHandler, type Task } from '@app/pg-queue';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { resetStatementStats, THIS_DATABASE } from '../support/statement-stats';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { pause, waitFor } from '../support/wait-for';

@Injectable()
class Handlers {
  readonly ran: string[] = [];

  @TaskHandler('rp.work', { mode: 'lease' })
  async work(task: Task<{ n: string }>) {
    this.ran.push(task.payload.n);
  }
}

describe('the rescuer pass and the dependency settler', () => {
  let db: TestDatabase;
  let qa: QueueApp | null = null;

  beforeEach(async () => {
    db = await createTestDatabase();
  });

  afterEach(async () => {
    await qa?.close();
    qa = null;
    await db.drop();
  });

  /** Calls, in this database since the reset, of statements whose text matches `pattern`. */
  const calls = async (pattern: string) =>
    Number((await db.sql<{ n: string }>(`SELECT coalesce(sum(calls), 0)::text AS n FROM pg_stat_statements WHERE ${THIS_DATABASE} AND query ~ $1`, [pattern]))[0].n);

  it('an idle pass sends no settle statement (the rescue itself says there is nothing to settle), and handler presence is one statement', async () => {
    await db.sql('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    qa = await bootQueueApp(db.prisma(), [Handlers], { rescueIntervalMs: 100, databaseUrl: db.url });
    await pause(300); // the start's own statements are behind us
    await resetStatementStats(db);
    await pause(2000);
    const rescues = await calls('WHERE t\\.state = .* AND t\\.locked_until < now');
    expect(rescues).toBeGreaterThanOrEqual(5); // the passes ran
    // Neither the fan-in settle, nor the children's, nor the sweep for older releases' children.
    expect({
      fanIn: await calls('WITH taken AS .* FROM "pgqueue"\\.task_dependency_debt\\s+WHERE'),
      children: await calls('WITH taken AS .* FROM "pgqueue"\\.workflow_child_debt ORDER BY id'),
      sweep: await calls('WITH ended AS \\(\\s+SELECT j\\.task_id AS workflow'),
    }).toEqual({ fanIn: 0, children: 0, sweep: 0 });
    // Handler presence: one statement a pass (handler_pass runs with JIT off), no transaction.
    expect(await calls('handler_pass\\(')).toBeGreaterThanOrEqual(5);
    expect({ begin: await calls('^BEGIN'), jitOff: await calls('^SET LOCAL jit') }).toEqual({ begin: 0, jitOff: 0 });
  });

  it('handler presence still renews its rows where handler_pass is missing (a schema printed by an older release)', async () => {
    await db.sql('DROP FUNCTION pgqueue.handler_pass');
    qa = await bootQueueApp(db.prisma(), [Handlers], { rescueIntervalMs: 100, databaseUrl: db.url, installSchema: false });
    expect(await db.sql("SELECT to_regproc('pgqueue.handler_pass') AS f")).toEqual([{ f: null }]);
    await db.sql('UPDATE pgqueue.queue_handler SET expires_at = now() - interval \'1 s\'');
    await waitFor('a pass to renew the row', async () => (await db.sql("SELECT 1 FROM pgqueue.queue_handler WHERE queue = 'rp.work' AND expires_at > now()")).length > 0, { timeoutMs: 5000 });
  });

  it('a debt whose notice nobody heard (no LISTEN) is settled by the next pass', async () => {
    // Without databaseUrl the instance does not LISTEN: only its passes settle.
    const handlers = new Handlers();
    qa = await bootQueueApp(db.prisma(), [{ provide: Handlers, useValue: handlers }], { rescueIntervalMs: 200, pollIntervalMs: 100 });
    const parent = await qa.queue.enqueue('rp.work', { n: 'parent' });
    await qa.queue.enqueue('rp.work', { n: 'dependant' }, { dependsOn: [parent] });
    await waitFor('the dependant to run', async () => handlers.ran.includes('dependant'), { timeoutMs: 10_000 });
    expect(handlers.ran).toEqual(['parent', 'dependant']);
  });
});
