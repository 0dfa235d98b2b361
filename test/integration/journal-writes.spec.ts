/**
 * Journal entries written many at once (recordMany, JournalWriter): each fenced by its own lease,
 * found by primary key whatever the statistics, and every call answered for its own entry.
 */
import { WorkflowRepository } from '../../libs/pg-queue/src/sql/workflow.repository';
import { workflowStatements } from '../../libs/pg-queue/src/sql/workflow.sql';
import { JournalWriter } from '../../libs/pg-queue/src/workflow/journal.writer';
import { genericPlan } from '../support/generic-plan';
import { schemaDatabase } from '../support/schema-database';

describe('journal entries written many at once', () => {
  const setup = schemaDatabase();

  async function running(n: number): Promise<{ id: string; token: string }[]> {
    return setup.db.sql<{ id: string; token: string }>(
      `INSERT INTO pgqueue.task (queue, payload, state, attempt, lease_token, locked_until)
       SELECT 'jw.q', '{}', 'running', 1, gen_random_uuid(), now() + interval '1 minute' FROM generate_series(1, $1::int)
       RETURNING id::text, lease_token::text AS token`,
      [n],
    );
  }

  it('one statement for the calls of one turn; a lost lease records nothing and says so', async () => {
    const [a, b, c] = await running(3);
    const repo = new WorkflowRepository('pgqueue', 'ch');
    let statements = 0;
    const prisma = setup.db.prisma(1);
    const writer = new JournalWriter((entries) => {
      statements++;
      return repo.recordMany(prisma, entries);
    });
    const entry = (lease: { id: string; token: string }, seq: number) => ({ lease, seq, kind: 'step', name: `s${seq}`, outcome: 'ok' as const, resultJson: `{"v":${seq}}`, sinceMs: 1 });
    const stale = { id: c.id, token: '00000000-0000-4000-8000-000000000000' };
    const results = await Promise.all([writer.record(entry(b, 0)), writer.record(entry(a, 0)), writer.record(entry(a, 1)), writer.record(entry(stale, 0))]);
    expect(results).toEqual([true, true, true, false]);
    expect(statements).toBe(1);
    const rows = await setup.db.sql<{ task_id: string; seq: number; result: unknown; attempt: number }>('SELECT task_id::text, seq, result, attempt FROM pgqueue.workflow_step ORDER BY task_id, seq');
    expect(rows).toEqual([
      { task_id: a.id, seq: 0, result: { v: 0 }, attempt: 1 },
      { task_id: a.id, seq: 1, result: { v: 1 }, attempt: 1 },
      { task_id: b.id, seq: 0, result: { v: 0 }, attempt: 1 },
    ]);
    // A position already taken (a replay's call that an earlier attempt journaled): false, nothing changed.
    expect(await writer.record({ ...entry(a, 1), resultJson: '{"v":99}' })).toBe(false);
    await prisma.$disconnect();
  });

  it('a failed statement fails every call of its turn', async () => {
    const writer = new JournalWriter(async () => {
      throw new Error('connection lost');
    });
    const lease = { id: '1', token: '00000000-0000-4000-8000-000000000000' };
    const calls = [0, 1].map((seq) => writer.record({ lease, seq, kind: 'step', name: 's', outcome: 'ok', resultJson: null, sinceMs: 0 }));
    await expect(Promise.all(calls)).rejects.toThrow('connection lost');
    await expect(calls[1]).rejects.toThrow('connection lost');
  });

  it('finds the tasks by primary key under a generic plan, whatever the statistics', async () => {
    await setup.db.sql(`INSERT INTO pgqueue.task (queue, payload) SELECT 'jw.plan', '{}' FROM generate_series(1, 5000)`);
    await setup.db.sql('ANALYZE pgqueue.task');
    const rows = `'[{"id":1,"token":"00000000-0000-4000-8000-000000000000","seq":0,"kind":"step","name":"s","outcome":"ok","result":null,"since_ms":0}]'`;
    const plan = await genericPlan(setup.db, workflowStatements('pgqueue').recordMany, ['text'], [rows]);
    expect({ seqScan: /Seq Scan on task\b(?!_)/.test(plan), byPrimaryKey: /task_pkey on task t/.test(plan) }).toEqual({ seqScan: false, byPrimaryKey: true });
  });
});
