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
});
