/**
 * The two statements that insert plain rows (enqueue.sql.ts): insertManyLean, for rows without a
 * parent, group, partition or dedup key and with one trace context (leanTaskColumns), and
 * insertMany (rows as JSON) for the others. Both must store every field the same way.
 */
import type { NewTaskRow } from '../../libs/pg-queue/src/sql/statement-values';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import { schemaDatabase } from '../support/schema-database';
import { taskRow } from '../support/task-rows';

const RUN_AT = new Date('2031-02-03T04:05:06.789Z');
const TRACE = JSON.stringify({ traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' });

/** Payloads and options that text lists and JSON could each get wrong: commas, nulls, negatives, dates. */
function rows(queue: string, given: Partial<NewTaskRow> = {}): NewTaskRow[] {
  const over = { maxAttempts: null, ...given };
  return [
    taskRow(queue, { payloadJson: JSON.stringify({ text: 'a,b,"c"', n: 1 }), ...over }),
    taskRow(queue, { payloadJson: 'null', priority: -3, ...over, maxAttempts: 4 }),
    taskRow(queue, { payloadJson: JSON.stringify('one,two'), delayMs: 1500, ...over }),
    taskRow(`${queue}:b`, { payloadJson: JSON.stringify([1, [2, { x: null }]]), priority: 7, runAt: RUN_AT, ...over }),
    taskRow(queue, { payloadJson: JSON.stringify({}), ...over }),
  ];
}

describe('plain enqueue statements', () => {
  const t = schemaDatabase();
  const repo = new TaskRepository('pgqueue', 'archive');

  async function stored(ids: string[]) {
    return t.db.sql(
      `SELECT t.queue, t.payload, t.priority, t.max_attempts, t.trace_context,
              CASE WHEN t.run_at = $2::timestamptz THEN 'runAt' ELSE (extract(epoch FROM t.run_at - t.created_at) * 1000)::int::text END AS due
       FROM unnest($1::bigint[]) WITH ORDINALITY AS x(id, ord) JOIN pgqueue.task t ON t.id = x.id ORDER BY x.ord`,
      [ids, RUN_AT.toISOString()],
    );
  }

  const expected = (queue: string, trace: unknown) => [
    { queue, payload: { text: 'a,b,"c"', n: 1 }, priority: 0, max_attempts: null, trace_context: trace, due: '0' },
    { queue, payload: null, priority: -3, max_attempts: 4, trace_context: trace, due: '0' },
    { queue, payload: 'one,two', priority: 0, max_attempts: null, trace_context: trace, due: '1500' },
    { queue: `${queue}:b`, payload: [1, [2, { x: null }]], priority: 7, max_attempts: null, trace_context: trace, due: 'runAt' },
    { queue, payload: {}, priority: 0, max_attempts: null, trace_context: trace, due: '0' },
  ];

  it('store every field alike, ids in input order, through the lean statement when the rows allow it', async () => {
    const prisma = t.db.prisma();
    // The statements sent, by which of the two they are.
    const sent: string[] = [];
    const watched = new Proxy(prisma, {
      get(t, p) {
        const v = Reflect.get(t, p, t) as unknown;
        if (p !== '$queryRawUnsafe' || typeof v !== 'function') return v;
        return (sql: string, ...args: unknown[]) => {
          sent.push(sql.includes('string_to_array($1') ? 'lean' : sql.includes('json_to_recordset') ? 'json' : 'other');
          return (v as (...a: unknown[]) => unknown).call(t, sql, ...args);
        };
      },
    });
    const lean = await repo.insert(watched, rows('es.lean'));
    const traced = await repo.insert(watched, rows('es.traced', { traceContext: TRACE }));
    // A row with a group key sends the whole call as JSON rows.
    const json = await repo.insert(watched, [...rows('es.json'), taskRow('es.json', { groupKey: 'g' })]);
    expect(sent).toEqual(['lean', 'lean', 'json']);
    // stored() reads the rows in the order of the ids returned: input order, or the rows differ.
    expect(await stored(lean)).toEqual(expected('es.lean', null));
    expect(await stored(traced)).toEqual(expected('es.traced', JSON.parse(TRACE)));
    expect(await stored(json.slice(0, 5))).toEqual(expected('es.json', null));
  });

  it('one row, as enqueue() sends it', async () => {
    const [id] = await repo.insert(t.db.prisma(), [taskRow('es.one', { payloadJson: JSON.stringify({ one: true }), priority: 2, maxAttempts: 1 })]);
    expect(await stored([id])).toEqual([{ queue: 'es.one', payload: { one: true }, priority: 2, max_attempts: 1, trace_context: null, due: '0' }]);
  });
});
