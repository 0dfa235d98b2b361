import { Injectable } from '@nestjs/common';
import { TaskHandler, type Task } from '@app/pg-queue';
import { drainQueue } from '@app/pg-queue/testing';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
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
});
