/**
 * An attempt's journal load reads a bounded amount of results (issue 41, defect 11): a workflow
 * whose steps returned large values replays them all, each read when its call replays, not all at
 * the start of every attempt.
 */
import { randomBytes } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { Workflow, type WorkflowContext } from '@app/pg-queue';
import { JOURNAL_LOAD_BYTES, WorkflowRepository } from '../../libs/pg-queue/src/sql/workflow.repository';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

const STEPS = 12;
/** Random base64: jsonb's compression cannot shrink it much, so 12 of them are well over the load's budget. */
const value = () => randomBytes(48 * 1024).toString('base64');

/** What each step returned on its one run, by workflow id and step. */
const produced = new Map<string, string>();

@Injectable()
class Large {
  @Workflow('load.large', { maxAttempts: 2 })
  async run(_input: unknown, wf: WorkflowContext) {
    const values = await Promise.all(
      Array.from({ length: STEPS }, (_, i) =>
        wf.step(`v${i}`, () => {
          const v = value();
          produced.set(`${wf.workflowId}:${i}`, v);
          return v;
        }),
      ),
    );
    await wf.sleep(100); // the next attempt replays every step
    await wf.sleep(100); // and the one after that
    return values.every((v, i) => v === produced.get(`${wf.workflowId}:${i}`)) ? 'same' : 'different';
  }
}

describe('journal loads', () => {
  let db: TestDatabase;
  let app: QueueApp;
  const loadedBytes: number[] = [];

  beforeAll(async () => {
    const load = WorkflowRepository.prototype.journals;
    jest.spyOn(WorkflowRepository.prototype, 'journals').mockImplementation(async function (this: WorkflowRepository, ...args) {
      const journals = await load.apply(this, args);
      for (const rows of journals.values()) loadedBytes.push(rows.reduce((n, r) => n + (r.result === null || r.result === undefined ? 0 : JSON.stringify(r.result).length), 0));
      return journals;
    });
    db = await createTestDatabase();
    app = await bootQueueApp(db.prisma(), [Large], { databaseUrl: db.url });
  });
  afterAll(async () => {
    await app.close();
    await db.drop();
    jest.restoreAllMocks();
  });

  it('read at most their budget of results; the rest come as each call replays, the same values', async () => {
    const id = await app.queue.enqueue('load.large', {});
    await waitFor('the workflow done', async () => (await app.queue.get(id))?.state === 'done');
    expect((await app.queue.get(id))?.result).toBe('same');
    const [{ bytes }] = await db.sql<{ bytes: number }>('SELECT sum(length(result::text))::int AS bytes FROM pgqueue.workflow_step WHERE task_id = $1', [id]);
    expect(bytes).toBeGreaterThan(2 * JOURNAL_LOAD_BYTES); // the journal is larger than one load reads
    expect(loadedBytes.length).toBeGreaterThanOrEqual(2); // the attempts after each sleep
    // Within the budget (as stored: jsonb of base64 is about its text's size), never the whole journal.
    for (const n of loadedBytes) expect(n).toBeLessThanOrEqual(JOURNAL_LOAD_BYTES + 1024);
  });
});
