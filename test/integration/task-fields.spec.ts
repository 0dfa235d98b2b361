/**
 * The definition of a task's fields (task-fields.ts) against the tables a fresh install creates:
 * every column of task and task_archive is defined, with its type and table, and nothing defined
 * is missing from them. A field added without its migration, or a migration without its field,
 * fails here; and what a task's fields are read back as (get) is what an enqueue wrote.
 */
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import { OperatorRepository } from '../../libs/pg-queue/src/sql/operator.repository';
import { TASK_FIELDS, toTaskInfo } from '../../libs/pg-queue/src/sql/task-fields';
import { installSchema } from '../../libs/pg-queue/src/sql/schema.installer';
import { taskRow } from '../support/task-rows';
import { buildTaskRow } from '../../libs/pg-queue/src/core/task-input';
import type { NewTaskRow } from '../../libs/pg-queue/src/sql/statement-values';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

describe('task fields (task-fields.ts)', () => {
  let db: TestDatabase;

  beforeAll(async () => {
    db = await createTestDatabase();
    await installSchema(db.prisma(), 'pgqueue');
  });
  afterAll(() => db.drop());

  const columns = async (table: string) =>
    (
      await db.sql<{ column: string; type: string }>(
        `SELECT attname AS column, format_type(atttypid, atttypmod) AS type FROM pg_attribute
         WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attname`,
        [`pgqueue.${table}`],
      )
    )
      .map((c) => `${c.column} ${c.type}`)
      .sort();
  const defined = (where: 'task' | 'archive') =>
    TASK_FIELDS.filter((f) => f.in === 'both' || f.in === where)
      .map((f) => `${f.column} ${f.type}`)
      .sort();

  it('defines every column of task, with its type, and no other', async () => {
    expect(defined('task')).toEqual(await columns('task'));
  });

  it('defines every column of task_archive, with its type, and no other', async () => {
    expect(defined('archive')).toEqual(await columns('task_archive'));
  });

  it('reads back, live and archived, every field an enqueue wrote', async () => {
    const repo = new TaskRepository('pgqueue', 'archive');
    const ops = new OperatorRepository('pgqueue');
    const runAt = new Date(Date.now() + 60_000);
    const [id] = await repo.insert(db.prisma(), [taskRow('tf.q', { payloadJson: '{"a":1}', priority: 3, runAt, maxAttempts: 4, dedupKey: 'k', groupKey: 'g', partitionKey: 'p' })]);
    const expected = { id, queue: 'tf.q', state: 'pending', payload: { a: 1 }, priority: 3, runAt, attempt: 0, maxAttempts: 4, key: 'k', group: 'g', result: null, dependenciesLeft: null };
    expect(toTaskInfo((await ops.get(db.prisma(), id))!)).toMatchObject(expected);
    await db.sql(`UPDATE pgqueue.task SET run_at = now() WHERE id = $1`, [id]);
    const [claimed] = (await repo.claim(db.prisma(), 'tf.q', 1, 'w', 60_000, 5)).rows;
    await repo.complete(db.prisma(), [{ id, token: claimed.lease_token, startedAt: performance.now(), finishedAt: performance.now(), result: '"r"' }], []);
    const archived = toTaskInfo((await ops.get(db.prisma(), id))!);
    expect(archived).toMatchObject({ ...expected, state: 'done', attempt: 1, result: 'r', runAt: expect.any(Date) });
    expect((await db.sql<{ partition_key: string; trace_context: unknown }>('SELECT partition_key FROM pgqueue.task_archive WHERE id = $1', [id]))[0]).toEqual({ partition_key: 'p' });
  });

  describe('tags, the field added as the example of adding one', () => {
    const repo = new TaskRepository('pgqueue', 'archive');
    const ops = new OperatorRepository('pgqueue');
    const tagsOf = async (id: string) => toTaskInfo((await ops.get(db.prisma(), id))!).tags;
    const finish = async (queue: string, followUps: NewTaskRow[] = []) => {
      const [c] = (await repo.claim(db.prisma(), queue, 1, 'w', 60_000, 5)).rows;
      await repo.complete(db.prisma(), [{ id: c.id, token: c.lease_token, startedAt: performance.now(), finishedAt: performance.now() }], followUps);
      return c.id;
    };
    const row = (queue: string, options: Parameters<typeof buildTaskRow>[2], parentId: string | null = null) => buildTaskRow(queue, {}, options, { maxPayloadBytes: 1 << 20 }, parentId);

    it('an enqueue stores them, the plain way and alongside a key or a group; the archive keeps them', async () => {
      const [plain, untagged, keyed, grouped] = await repo.insert(db.prisma(), [
        row('tg.a', { tags: ['x', 'y'] }), row('tg.a', {}), row('tg.a', { tags: ['k'], key: 'k1' }), row('tg.a', { tags: ['g'], group: 'g1' }),
      ]);
      expect([await tagsOf(plain), await tagsOf(untagged), await tagsOf(keyed), await tagsOf(grouped)]).toEqual([['x', 'y'], null, ['k'], ['g']]);
      // Rows that would otherwise go the lean way (insertManyLean carries no tags).
      const [leanTagged, lean] = await repo.insert(db.prisma(), [row('tg.a', { tags: ['only'] }), row('tg.a', {})]);
      expect([await tagsOf(leanTagged), await tagsOf(lean)]).toEqual([['only'], null]);
      for (let i = 0; i < 6; i++) await finish('tg.a');
      expect((await ops.get(db.prisma(), plain))!.state).toBe('done');
      expect(await tagsOf(plain)).toEqual(['x', 'y']);
    });

    it("a follow-up's and a debounced enqueue's are stored; a replace and a debounce fold take the newest", async () => {
      const [parent] = await repo.insert(db.prisma(), [row('tg.b', {})]);
      await finish('tg.b', [row('tg.c', { tags: ['child'] }, parent)]);
      const [child] = await db.sql<{ id: string }>("SELECT id::text FROM pgqueue.task WHERE queue = 'tg.c'");
      expect(await tagsOf(child.id)).toEqual(['child']);

      const [first] = await repo.insert(db.prisma(), [row('tg.d', { tags: ['old'], key: 'same', delayMs: 60_000 })]);
      await repo.insert(db.prisma(), [row('tg.d', { tags: ['new'], key: 'same', onConflict: 'replace', delayMs: 60_000 })]);
      expect(await tagsOf(first)).toEqual(['new']);

      const [burst] = await repo.insert(db.prisma(), [row('tg.e', { tags: ['one'], debounce: { key: 'b', delayMs: 60_000 } })]);
      expect(await repo.insert(db.prisma(), [row('tg.e', { tags: ['two'], debounce: { key: 'b', delayMs: 60_000 } })])).toEqual([burst]);
      expect(await tagsOf(burst)).toEqual(['two']);
    });
  });
});

