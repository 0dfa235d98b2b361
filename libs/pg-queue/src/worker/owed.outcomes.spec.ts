import type { Logger } from '@nestjs/common';
import { assertOneLeasePerTask, type BackOff, type Failure, type Lease } from '../sql/statement-values';
import type { TaskRepository } from '../sql/task.repository';
import type { SqlExecutor } from '../types';
import { OwedOutcomes } from './owed.outcomes';

// The bookkeeping of failed claims (what the database does with them: lost-claim-answer.spec).
describe('OwedOutcomes: failed claims', () => {
  const logger = { warn: () => undefined } as unknown as Logger;
  const db = {} as SqlExecutor;

  function repoFinding(found: Lease[]) {
    const asked: { queue: string; claimIds: string[] }[] = [];
    const released: Lease[][] = [];
    const repo = {
      claimedWith: async (_db: SqlExecutor, queue: string, claimIds: string[]) => {
        asked.push({ queue, claimIds });
        return found.filter((l) => claimIds.some((c) => l.token.replace(/-/g, '').startsWith(c)));
      },
      release: async (_db: SqlExecutor, leases: Lease[]) => {
        released.push(leases);
        return new Set(leases.map((l) => l.id));
      },
    } as unknown as TaskRepository;
    return { repo, asked, released };
  }

  it('looks for every failed claim once the database answers, by queue, and gives back what it finds', async () => {
    const owed = new OwedOutcomes(logger);
    owed.lostClaim('q1', '00000000000000aa');
    owed.lostClaim('q1', '00000000000000bb');
    owed.lostClaim('q2', '00000000000000cc');
    expect(owed.due).toBe(true);
    const token = '00000000-0000-00aa-0000-000000000007';
    const { repo, asked, released } = repoFinding([{ id: '7', token }]);
    expect(await owed.settle(db, repo)).toBe(1);
    expect(asked).toEqual([{ queue: 'q1', claimIds: ['00000000000000aa', '00000000000000bb'] }, { queue: 'q2', claimIds: ['00000000000000cc'] }]);
    expect(released).toEqual([[{ id: '7', token }]]);
    // Looked for once: not due again until a rescuer pass or a reconnect asks (the window is open).
    expect(owed.due).toBe(false);
  });

  it('keeps at most 1 000 failed claims, dropping the oldest (a long outage fails one a second)', async () => {
    const owed = new OwedOutcomes(logger);
    for (let i = 0; i < 1500; i++) owed.lostClaim('q', i.toString(16).padStart(16, '0'));
    const { repo, asked } = repoFinding([]);
    await owed.settle(db, repo);
    expect(asked).toHaveLength(1);
    expect(asked[0].claimIds).toHaveLength(1000);
    expect(asked[0].claimIds[0]).toBe((500).toString(16).padStart(16, '0'));
  });
});

describe('OwedOutcomes: back-offs', () => {
  const logger = { warn: () => undefined } as unknown as Logger;
  const db = {} as SqlExecutor;
  const backOff = (id: string): BackOff => ({ id, token: `00000000-0000-4000-8000-00000000000${id}`, untilMs: 5_000, scope: 'queue', limiter: null, reason: '429' });

  it('writes them as back-offs, and keeps one whose row a business transaction holds for the next settle', async () => {
    const owed = new OwedOutcomes(logger);
    owed.backOff([backOff('1'), backOff('2')]);
    expect(owed.size).toBe(2);
    const written: BackOff[][] = [];
    let holding = new Set(['2']);
    const repo = {
      backOff: async (_db: SqlExecutor, backOffs: BackOff[], held?: Set<string>) => {
        written.push(backOffs);
        for (const b of backOffs) if (holding.has(b.id)) held?.add(b.id);
        return new Set(backOffs.filter((b) => !holding.has(b.id)).map((b) => b.id));
      },
      release: async () => new Set(),
    } as unknown as TaskRepository;
    expect(await owed.settle(db, repo)).toBe(1);
    expect(owed.size).toBe(1);
    holding = new Set();
    expect(await owed.settle(db, repo)).toBe(1);
    expect({ size: owed.size, written: written.map((w) => w.map((b) => b.id)) }).toEqual({ size: 0, written: [['1', '2'], ['2']] });
  });
});

describe('OwedOutcomes: two leases of one task', () => {
  const logger = { warn: () => undefined } as unknown as Logger;
  const db = {} as SqlExecutor;

  // Attempt 1's release was owed, its lease ran out, this instance claimed the task again, and
  // attempt 2 ended in an outage too: both leases are owed. The statements fence by (id, token)
  // and take one lease per task (assertOneLeasePerTask), so one call with both threw, at every
  // settle, and nothing owed after them (back-offs, failures) was ever written.
  it('writes them in separate statements, and the rest of what is owed with them', async () => {
    const owed = new OwedOutcomes(logger);
    const lease = (id: string, n: number): Lease => ({ id, token: `00000000-0000-4000-8000-00000000000${n}` });
    owed.release([lease('7', 1), lease('7', 2), lease('8', 3)]);
    owed.fail([{ ...lease('9', 4), error: 'x', delayMs: 0, fatal: false }], true);
    const statements: string[][] = [];
    const repo = {
      release: async (_db: SqlExecutor, leases: Lease[]) => {
        assertOneLeasePerTask(leases);
        statements.push(leases.map((l) => l.token.slice(-1)));
        return new Set(leases.map((l) => l.id));
      },
      fail: async (_db: SqlExecutor, failures: Failure[]) => {
        assertOneLeasePerTask(failures);
        statements.push(failures.map((f) => f.token.slice(-1)));
        return new Map();
      },
    } as unknown as TaskRepository;
    expect(await owed.settle(db, repo)).toBe(4);
    expect({ size: owed.size, statements }).toEqual({ size: 0, statements: [['1', '3'], ['2'], ['4']] });
  });
});
