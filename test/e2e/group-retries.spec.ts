import { Injectable } from '@nestjs/common';
import { Client } from 'pg';
import { TaskHandler, type Task } from '@app/pg-queue';
import { claimSql, claimStatements, claimedRows, newClaimId } from '../../libs/pg-queue/src/sql/claim.sql';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import { drainQueue } from '@app/pg-queue/testing';
import { bootQueueApp, deferred, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

type Job = { name: string; failFirst?: boolean };
const OPTIONS = { mode: 'lease' as const, concurrency: 10, maxAttempts: 3, backoff: { type: 'fixed' as const, delayMs: 0 } };

/** Records every run with its interval; each run takes a few ms so overlaps would show. */
@Injectable()
class GroupRetryHandlers {
  runs: { name: string; attempt: number; start: number; end: number }[] = [];

  private async run(task: Task<Job>) {
    const start = performance.now();
    await new Promise((r) => setTimeout(r, 20));
    this.runs.push({ name: task.payload.name, attempt: task.attempt, start, end: performance.now() });
    if (task.payload.failFirst && task.attempt === 1) throw new Error('not yet');
  }

  @TaskHandler('gr.blocks', OPTIONS)
  async blocks(task: Task<Job>) {
    await this.run(task);
  }

  @TaskHandler('gr.skips', { ...OPTIONS, retryBlocksGroup: false })
  async skips(task: Task<Job>) {
    await this.run(task);
  }

  started: string[] = [];
  hold = deferred();
  holding = deferred();

  @TaskHandler('gr.race', { mode: 'lease' })
  async race(task: Task<Job>) {
    this.started.push(task.payload.name);
    this.holding.resolve();
    await this.hold.promise;
  }
}

describe('per-group order with retries (issue 12 item 5): one at a time per group, always', () => {
  let db: TestDatabase;
  let qa: QueueApp;
  let h: GroupRetryHandlers;

  beforeAll(async () => {
    db = await createTestDatabase();
    qa = await bootQueueApp(db.prisma(), [GroupRetryHandlers], { autoStart: false });
    h = qa.app.get(GroupRetryHandlers);
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });

  async function runGroup(queue: string) {
    h.runs = [];
    await qa.queue.enqueueMany(
      [{ name: 'a', failFirst: true }, { name: 'b' }, { name: 'c' }].map((payload) => ({ queue, payload, options: { group: 'g1' } })),
    );
    await drainQueue(qa.app, queue);
    const runs = [...h.runs].sort((x, y) => x.start - y.start);
    for (let i = 1; i < runs.length; i++) {
      expect({ run: runs[i].name, startedBeforePreviousEnded: runs[i].start < runs[i - 1].end }).toEqual({ run: runs[i].name, startedBeforePreviousEnded: false });
    }
    return runs.map((r) => `${r.name}#${r.attempt}`);
  }

  it('retryBlocksGroup true (default): the retry goes first', async () => {
    expect(await runGroup('gr.blocks')).toEqual(['a#1', 'a#2', 'b#1', 'c#1']);
  });

  it('retryBlocksGroup false: the tasks waiting when it failed go first, the retry after them, never beside them', async () => {
    expect(await runGroup('gr.skips')).toEqual(['a#1', 'b#1', 'c#1', 'a#2']);
  });

  describe('a claim that raced a rival claim of its group gives way before its handler starts', () => {
    let clients: Client[];
    const client = async () => {
      const c = new Client({ connectionString: db.url });
      await c.connect();
      clients.push(c);
      return c;
    };
    beforeEach(() => {
      clients = [];
      h.started = [];
      h.hold = deferred();
      h.holding = deferred();
    });
    afterEach(async () => {
      h.hold.resolve();
      await Promise.all(clients.map((c) => c.end()));
      await db.sql('TRUNCATE pgqueue.task, pgqueue.task_archive');
    });

    it('an earlier task that commits late, claimed while a later one\'s claim is in flight: the later one gives way', async () => {
      // p gets the earlier place (its id) but commits after q.
      const late = await client();
      await late.query('BEGIN');
      await late.query(`INSERT INTO pgqueue.task (queue, payload, group_key) VALUES ('gr.race', '{"name":"p"}', 'g1')`);
      await qa.queue.enqueue('gr.race', { name: 'q' }, { group: 'g1' });
      // A rival worker's claim of q, its statement's window held open by a transaction.
      const rival = await client();
      await rival.query('BEGIN');
      const { rows } = await rival.query(claimSql(claimStatements('pgqueue'), 10), ['gr.race', 10, 'rival', 60_000, 5, newClaimId()]);
      const [q] = claimedRows(rows[0].claimed, 'gr.race');
      expect((q.payload as Job).name).toBe('q');
      await late.query('COMMIT');
      // This app's worker claims now: its snapshot shows p first and nothing of g1 running.
      const drained = drainQueue(qa.app, 'gr.race');
      await h.holding.promise;
      expect(h.started).toEqual(['p']);
      await rival.query('COMMIT');
      // The rival's check, run after its claim committed, sees p running: q gives way.
      const repo = qa.app.get(TaskRepository, { strict: false });
      expect([...(await repo.groupRivals(db.prisma(1), [{ id: q.id, token: q.lease_token }]))]).toEqual([q.id]);
      h.hold.resolve();
      await drained;
    });

    it('this worker gives its claimed task back uncounted when a rival of its group runs', async () => {
      const ids = await qa.queue.enqueueMany(['p', 'q'].map((name) => ({ queue: 'gr.race', payload: { name }, options: { group: 'g2' } })));
      await db.sql('UPDATE pgqueue.task SET group_pos = $1 WHERE id = $2', [Number(ids[1]) + 1000, ids[0]]); // q goes first
      const repo = qa.app.get(TaskRepository, { strict: false });
      const claim = repo.claim.bind(repo);
      // Right after this worker's claim of q commits, a rival claim of p (made from an older snapshot) commits too.
      const spy = jest.spyOn(repo, 'claim').mockImplementationOnce(async (...args) => {
        const result = await claim(...args);
        await db.sql("UPDATE pgqueue.task SET state = 'running', attempt = 1, lease_token = gen_random_uuid(), locked_until = now() + interval '1 minute' WHERE id = $1", [ids[0]]);
        return result;
      });
      try {
        await drainQueue(qa.app, 'gr.race');
      } finally {
        spy.mockRestore();
      }
      expect(h.started).toEqual([]);
      expect(await db.sql('SELECT id::text, state, attempt FROM pgqueue.task ORDER BY id')).toEqual([
        { id: ids[0], state: 'running', attempt: 1 },
        { id: ids[1], state: 'pending', attempt: 0 },
      ]);
    });
  });
});
