import { JOURNAL_BATCH_MAX_BYTES, JOURNAL_BATCH_MAX_ENTRIES, JournalWriter } from './journal.writer';
import type { JournalRecord } from '../sql/workflow.repository';

const entry = (id: number, result = '{"v":1}'): JournalRecord => ({
  lease: { id: String(id), token: `t${id}` } as JournalRecord['lease'],
  seq: 0, kind: 'step', name: 's', outcome: 'ok', resultJson: result, sinceMs: 0,
});
/** A database error as Prisma reports it (see database-error.ts). */
const dbError = (code: string) => Object.assign(new Error(`db ${code}`), { code: 'P2010', meta: { code, message: code } });

/** A writer whose statements fail with `fail` when they carry an entry of task `poisoned`. */
function writer(fail: Error, poisoned = '3') {
  const statements: string[][] = [];
  const journal = new JournalWriter(async (entries) => {
    statements.push(entries.map((e) => e.lease.id));
    if (entries.some((e) => e.lease.id === poisoned)) throw fail;
    return new Set(entries.map((e) => `${e.lease.id}/${e.seq}`));
  });
  return { journal, statements };
}

describe('JournalWriter', () => {
  it('writes the calls of one turn in one statement; an entry the server rejects fails alone', async () => {
    const { journal, statements } = writer(dbError('22P02'));
    const outcomes = await Promise.allSettled([1, 2, 3, 4, 5].map((id) => journal.record(entry(id))));
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
    expect(outcomes.filter((o) => o.status === 'fulfilled').every((o) => o.value === true)).toBe(true);
    expect(statements[0]).toEqual(['1', '2', '3', '4', '5']);
  });

  it.each([
    ['a lost connection', dbError('08006')],
    ['a statement timeout', dbError('57014')],
    ['no database error at all (a pool timeout)', new Error('Timed out fetching a new connection from the connection pool')],
  ])('%s fails the whole statement without writing it again', async (_what, err) => {
    const { journal, statements } = writer(err);
    const outcomes = await Promise.allSettled([1, 2, 3].map((id) => journal.record(entry(id))));
    expect(outcomes.every((o) => o.status === 'rejected')).toBe(true);
    expect(statements).toHaveLength(1);
  });

  it(`caps a statement at ${JOURNAL_BATCH_MAX_ENTRIES} entries and ${JOURNAL_BATCH_MAX_BYTES} bytes of results`, async () => {
    const { journal, statements } = writer(dbError('22P02'), 'none');
    await Promise.all(Array.from({ length: 250 }, (_, i) => journal.record(entry(i))));
    expect(statements.map((s) => s.length)).toEqual([100, 100, 50]);
    statements.length = 0;
    const big = `"${'x'.repeat(JOURNAL_BATCH_MAX_BYTES / 2)}"`;
    await Promise.all([1, 2, 3].map((id) => journal.record(entry(id, big))));
    expect(statements.map((s) => s.length)).toEqual([1, 1, 1]);
  });
});
