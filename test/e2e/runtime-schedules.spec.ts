/**
 * Schedules created at run time (issue 27, item 4): `queue.upsertSchedule` / `getSchedule` /
 * `listSchedules` / `removeSchedule`, stored in `schedule_runtime` beside the declared ones'
 * `schedule` table (which older instances declare and retire) and ticked by the same SKIP LOCKED
 * pass, so every tick is enqueued once across instances.
 */
import { Injectable } from '@nestjs/common';
import { Client } from 'pg';
import { InvalidScheduleError, ScheduleNameTakenError, TaskHandler, type Task } from '@app/pg-queue';
import { tickSchedules } from '@app/pg-queue/testing';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { pause, waitFor } from '../support/wait-for';

@Injectable()
class RuntimeHandlers {
  @TaskHandler('rt.pulse', { mode: 'lease' })
  async pulse(_task: Task) {}
}

@Injectable()
class Declared {
  @TaskHandler('rt.declared', { mode: 'lease', schedule: { cron: '0 3 * * *', name: 'nightly' } })
  async run(_task: Task) {}
}

/** The run_at (ms) and payload of every task of `queue`, live or archived, oldest first. */
const ticksOf = (db: TestDatabase, queue: string) =>
  db
    .sql<{ ms: string; payload: unknown }>(
      `SELECT (extract(epoch FROM run_at) * 1000)::bigint::text AS ms, payload FROM pgqueue.task WHERE queue = $1
       UNION ALL SELECT (extract(epoch FROM run_at) * 1000)::bigint::text, payload FROM pgqueue.task_archive WHERE queue = $1 ORDER BY 1`,
      [queue],
    )
    .then((rows) => rows.map((r) => ({ at: Number(r.ms), payload: r.payload })));

/**
 * The previous release's statements, word for word (main's schedule.sql.ts, schema "pgqueue"), as
 * an older instance runs them at startup during a rolling deploy: it declares its schedules
 * (upsert: $1 name, $2 queue, $3 cron, $4 every_ms, $5 tz, $6 payload, $7 missed, $8 first tick),
 * then retires those of its queues that its code no longer declares ($1 queue[], $2 kept name[]).
 */
const OLDER = {
  upsert: `
INSERT INTO "pgqueue".schedule AS sc (name, queue, cron, every_ms, tz, payload, missed, next_run_at)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8)
ON CONFLICT (name) DO UPDATE SET
  queue = EXCLUDED.queue, payload = EXCLUDED.payload, missed = EXCLUDED.missed,
  cron = EXCLUDED.cron, every_ms = EXCLUDED.every_ms, tz = EXCLUDED.tz,
  next_run_at = CASE WHEN sc.cron IS NOT DISTINCT FROM EXCLUDED.cron
                      AND sc.every_ms IS NOT DISTINCT FROM EXCLUDED.every_ms
                      AND sc.tz IS NOT DISTINCT FROM EXCLUDED.tz
                     THEN sc.next_run_at ELSE EXCLUDED.next_run_at END,
  updated_at = now()`,
  retire: `
DELETE FROM "pgqueue".schedule WHERE queue = ANY ($1::text[]) AND NOT (name = ANY ($2::text[])) RETURNING name`,
};

describe('runtime schedules', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db.drop());

  it('fires once per tick across three instances, reaches an instance started later, takes changes, and stops everywhere once removed', async () => {
    const boot = (i: number) => bootQueueApp(db.prisma(4), [RuntimeHandlers], { workerId: `rt${i}`, databaseUrl: db.url });
    const apps: QueueApp[] = await Promise.all([0, 1, 2].map(boot));
    let later: QueueApp | null = null;
    try {
      // The instances started without any schedule: their tickers sleep their longest (30 s).
      // The upsert's NOTIFY wakes them, so the first tick (at most 1 s away) fires on time.
      const upsertedAt = Date.now();
      const created = await apps[0].queue.upsertSchedule('pulse', { queue: 'rt.pulse', everyMs: 1000, payload: { v: 1 } });
      expect(created).toBe(true);
      await waitFor('the first tick', async () => (await ticksOf(db, 'rt.pulse')).length >= 1, { timeoutMs: 10_000 });
      expect((await ticksOf(db, 'rt.pulse'))[0].at).toBeLessThanOrEqual(upsertedAt + 1000);
      await waitFor('6 ticks', async () => (await ticksOf(db, 'rt.pulse')).length >= 6);

      // An instance started later sees it: the first three leave, the ticks go on.
      later = await boot(3);
      await Promise.all(apps.map((a) => a.close()));
      const before = (await ticksOf(db, 'rt.pulse')).length;
      await waitFor('ticks from the later instance', async () => (await ticksOf(db, 'rt.pulse')).length >= before + 3);

      const ticks = await ticksOf(db, 'rt.pulse');
      expect(new Set(ticks.map((t) => t.at)).size).toBe(ticks.length); // no tick twice
      for (let i = 1; i < ticks.length; i++) expect(ticks[i].at - ticks[i - 1].at).toBe(1000); // none skipped
      expect(ticks.every((t) => t.at % 1000 === 0 && (t.payload as { v: number }).v === 1)).toBe(true);

      // An upsert of the same name changes it: new payload and period, false (not created).
      const changedAt = Date.now();
      expect(await later.queue.upsertSchedule('pulse', { queue: 'rt.pulse', everyMs: 2000, payload: { v: 2 } })).toBe(false);
      await waitFor('ticks of the changed schedule', async () => (await ticksOf(db, 'rt.pulse')).filter((t) => (t.payload as { v: number }).v === 2).length >= 2);
      const changed = (await ticksOf(db, 'rt.pulse')).filter((t) => t.at > changedAt + 1000);
      expect(changed.every((t) => (t.payload as { v: number }).v === 2 && t.at % 2000 === 0)).toBe(true);
      expect(await later.queue.getSchedule('pulse')).toMatchObject({ name: 'pulse', queue: 'rt.pulse', everyMs: 2000, cron: null, payload: { v: 2 }, declared: false });

      // Removed: no instance enqueues it again, not even a pass forced now.
      expect(await later.queue.removeSchedule('pulse')).toBe(true);
      expect(await later.queue.removeSchedule('pulse')).toBe(false);
      const atRemoval = (await ticksOf(db, 'rt.pulse')).length;
      expect(await tickSchedules(later.app)).toBe(0);
      await pause(2500); // more than one period: an absence cannot be waited for
      expect((await ticksOf(db, 'rt.pulse')).length).toBe(atRemoval);
      expect(await later.queue.getSchedule('pulse')).toBeNull();
    } finally {
      await Promise.all(apps.map((a) => a.close()));
      await later?.close();
    }
  });

  it('declared schedules are unaffected, and one name is never both: a clear error either way', async () => {
    const a = await bootQueueApp(db.prisma(2), [Declared], { autoStart: true });
    try {
      // A runtime schedule on a queue whose handler declares another one.
      await a.queue.upsertSchedule('declared.extra', { queue: 'rt.declared', cron: '30 4 * * *', timezone: 'Europe/Berlin' });
      const err = await a.queue.upsertSchedule('nightly', { queue: 'rt.declared', everyMs: 1000 }).catch((e: Error) => e);
      expect(err).toBeInstanceOf(ScheduleNameTakenError);
      expect((err as Error).message).toBe('pg-queue: schedule "nightly" is declared in code; change it there, or give the runtime schedule another name');
      await expect(a.queue.removeSchedule('nightly')).rejects.toThrow(ScheduleNameTakenError);
      const list = await a.queue.listSchedules();
      expect(list.map((s) => [s.name, s.declared, s.timezone])).toEqual([
        ['declared.extra', false, 'Europe/Berlin'],
        ['nightly', true, 'UTC'],
      ]);
    } finally {
      await a.close();
    }
    // A restart of the declaring app retires what the code dropped, never a runtime schedule.
    const b = await bootQueueApp(db.prisma(2), [Declared], { autoStart: true });
    await b.close();
    expect(await db.sql("SELECT name FROM pgqueue.schedule WHERE queue = 'rt.declared'")).toEqual([{ name: 'nightly' }]);
    expect(await db.sql("SELECT name FROM pgqueue.schedule_runtime WHERE queue = 'rt.declared'")).toEqual([{ name: 'declared.extra' }]);

    // A declared schedule whose name a runtime one holds fails the startup, naming the way out.
    @Injectable()
    class Clash {
      @TaskHandler('rt.clash', { schedule: { everyMs: 60_000, name: 'declared.extra' } })
      async run(_task: Task) {}
    }
    const clash = await bootQueueApp(db.prisma(2), [Clash], { autoStart: true }).then(() => null, (e: Error) => e);
    expect(clash).toBeInstanceOf(ScheduleNameTakenError);
    expect(clash?.message).toBe(
      'pg-queue: schedule "declared.extra" was created at run time (upsertSchedule); remove it (removeSchedule, `pg-queue schedules remove`) or give the declared schedule another name',
    );
    expect(await db.sql("SELECT queue FROM pgqueue.schedule_runtime WHERE name = 'declared.extra'")).toEqual([{ queue: 'rt.declared' }]);
    expect(await db.sql("SELECT queue FROM pgqueue.schedule WHERE name = 'declared.extra'")).toEqual([]);
  });

  it('a declaration and an upsert of one name racing: the later one waits for the name and sees the earlier one', async () => {
    const a = await bootQueueApp(db.prisma(2), [], { autoStart: false });
    // A starting instance declaring "race", in the middle of its transaction: it holds the name's
    // lock and has written its row, not yet committed. A check by the upsert alone would not see it.
    const declaring = new Client({ connectionString: db.url });
    await declaring.connect();
    try {
      await declaring.query('BEGIN');
      await declaring.query("SELECT pg_advisory_xact_lock(x'706773'::int, hashtext('pgqueue.race'))");
      await declaring.query("INSERT INTO pgqueue.schedule (name, queue, every_ms, next_run_at) VALUES ('race', 'rt.race', 60000, now() + interval '1 minute')");
      const upsert = a.queue.upsertSchedule('race', { queue: 'rt.race', everyMs: 1000 }).then(() => null, (e: Error) => e);
      await waitFor('the upsert to wait for the name', async () => (await db.sql("SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")).length > 0);
      await declaring.query('COMMIT');
      expect(await upsert).toBeInstanceOf(ScheduleNameTakenError);
      expect(await db.sql("SELECT name FROM pgqueue.schedule_runtime WHERE name = 'race'")).toEqual([]);
    } finally {
      await declaring.end();
      await a.close();
      await db.sql("DELETE FROM pgqueue.schedule WHERE name = 'race'");
    }
  });

  // Without databaseUrl no NOTIFY reaches the ticker: it must look again within the poll interval,
  // not sleep the 30 s it sleeps while LISTEN works.
  it('without LISTEN, a schedule made while the ticker sleeps fires within the poll interval', async () => {
    const a = await bootQueueApp(db.prisma(2), [], { autoStart: true, pollIntervalMs: 500 });
    try {
      await pause(1500); // the ticker's first pass found nothing: it sleeps
      const madeAt = Date.now();
      await a.queue.upsertSchedule('poll.made', { queue: 'rt.poll', everyMs: 1000, payload: { v: 1 } });
      await waitFor('a tick', async () => (await ticksOf(db, 'rt.poll')).length >= 1, { timeoutMs: 10_000 });
      expect((await ticksOf(db, 'rt.poll'))[0].at).toBeLessThanOrEqual(madeAt + 2000);
      expect(await a.queue.removeSchedule('poll.made')).toBe(true);
    } finally {
      await a.close();
    }
  });

  it('an older instance (the previous release: it knows only the schedule table) neither deletes nor changes a runtime schedule, which keeps firing', async () => {
    const a = await bootQueueApp(db.prisma(2), [], { autoStart: true });
    try {
      await a.queue.upsertSchedule('older.kept', { queue: 'rt.older', everyMs: 1000, payload: { from: 'runtime' } });
      await a.queue.upsertSchedule('older.clash', { queue: 'rt.older.clash', cron: '0 5 * * *', payload: { from: 'runtime' } });
      // The older instance starts: it declares its schedules, one of them under a runtime schedule's
      // name, and retires the schedules of its queue (rt.older) that its code does not declare.
      await db.sql(OLDER.upsert, ['older.declared', 'rt.older', null, 3_600_000, null, '{"from":"older"}', 'skip', new Date(Date.now() + 3_600_000).toISOString()]);
      await db.sql(OLDER.upsert, ['older.clash', 'rt.older', null, 3_600_000, null, '{"from":"older"}', 'skip', new Date(Date.now() + 3_600_000).toISOString()]);
      await db.sql(OLDER.retire, [['rt.older', 'rt.older.clash'], ['older.declared', 'older.clash']]);

      expect(await a.queue.getSchedule('older.kept')).toMatchObject({ queue: 'rt.older', everyMs: 1000, payload: { from: 'runtime' }, declared: false });
      // The clash: the older instance wrote a declared schedule of that name beside the runtime one,
      // which it left as it was (a newer instance declaring it would fail to start instead).
      const clash = (await a.queue.listSchedules()).filter((s) => s.name === 'older.clash');
      expect(clash.map((s) => [s.declared, s.queue, s.cron, s.everyMs, s.payload])).toEqual([
        [true, 'rt.older', null, 3_600_000, { from: 'older' }],
        [false, 'rt.older.clash', '0 5 * * *', null, { from: 'runtime' }],
      ]);

      // And it keeps firing (the newer instance's ticker; the older one never fires it).
      const retiredAt = Date.now();
      await waitFor('two ticks after the older instance retired', async () => (await ticksOf(db, 'rt.older')).filter((t) => t.at > retiredAt).length >= 2, { timeoutMs: 10_000 });
      expect((await ticksOf(db, 'rt.older')).every((t) => (t.payload as { from: string }).from === 'runtime')).toBe(true);
      expect(await a.queue.removeSchedule('older.clash')).toBe(true); // the runtime one; the declared one stays
      expect((await a.queue.getSchedule('older.clash'))?.declared).toBe(true);
      expect(await a.queue.removeSchedule('older.kept')).toBe(true);
    } finally {
      await a.close();
      await db.sql("DELETE FROM pgqueue.schedule WHERE name LIKE 'older.%'");
    }
  });

  it('migration 21 on a database that has declared schedules: they stay declared, and runtime ones go to the new table', async () => {
    await db.sql("INSERT INTO pgqueue.schedule (name, queue, every_ms, next_run_at) VALUES ('old.one', 'rt.old', 60000, now() + interval '1 minute')");
    // Back to the schema before migration 21, its row in place.
    await db.sql('DROP TABLE pgqueue.schedule_runtime');
    await db.sql('DELETE FROM pgqueue.schema_version WHERE version = 21');
    const a = await bootQueueApp(db.prisma(2), [], { autoStart: false });
    try {
      expect(await db.sql("SELECT indexname FROM pg_indexes WHERE schemaname = 'pgqueue' AND tablename = 'schedule_runtime' ORDER BY 1")).toEqual([
        { indexname: 'schedule_runtime_due_idx' },
        { indexname: 'schedule_runtime_pkey' },
      ]);
      expect(await a.queue.getSchedule('old.one')).toMatchObject({ declared: true, everyMs: 60_000 });
      await expect(a.queue.removeSchedule('old.one')).rejects.toThrow(ScheduleNameTakenError);
      await expect(a.queue.upsertSchedule('old.one', { queue: 'rt.old', everyMs: 1000 })).rejects.toThrow(ScheduleNameTakenError);
      expect(await a.queue.upsertSchedule('new.one', { queue: 'rt.old', everyMs: 60_000 })).toBe(true);
      expect(await db.sql("SELECT name FROM pgqueue.schedule_runtime WHERE queue = 'rt.old'")).toEqual([{ name: 'new.one' }]);
      expect(await db.sql("SELECT name FROM pgqueue.schedule WHERE queue = 'rt.old'")).toEqual([{ name: 'old.one' }]);
      expect(await a.queue.removeSchedule('new.one')).toBe(true);
    } finally {
      await a.close();
      await db.sql("DELETE FROM pgqueue.schedule WHERE name = 'old.one'");
    }
  });

  it('refuses bad input up front, naming the option', async () => {
    const a = await bootQueueApp(db.prisma(2), [], { autoStart: false });
    try {
      const bad = async (name: unknown, options: unknown) => {
        const err = await a.queue.upsertSchedule(name as string, options as never).then(() => null, (e: Error) => e);
        expect(err).toBeInstanceOf(InvalidScheduleError);
        return err!.message;
      };
      expect(await bad('x', { queue: 'q', cron: '61 * * * *' })).toMatch(/^pg-queue: invalid option upsertSchedule\("x"\)\.cron: .*minute/i);
      expect(await bad('x', { queue: 'q', cron: '0 * * * *', timezone: 'Mars/Olympus' })).toBe('pg-queue: invalid option upsertSchedule("x").timezone: unknown time zone "Mars/Olympus"');
      expect(await bad('x', { queue: 'q', everyMs: 1000, timezone: 'UTC' })).toBe('pg-queue: invalid option upsertSchedule("x").timezone: only applies to cron');
      expect(await bad('x', { queue: 'q', everyMs: 1.5 })).toMatch(/^pg-queue: invalid option upsertSchedule\("x"\)\.everyMs: expected an integer from 100/);
      expect(await bad('x', { queue: 'q', everyMs: 0 })).toMatch(/everyMs: expected an integer from 100/);
      expect(await bad('x', { queue: 'q', cron: '* * * * *', everyMs: 1000 })).toMatch(/\.cron: give exactly one of cron and everyMs/);
      expect(await bad('x', { queue: 'bad queue', everyMs: 1000 })).toMatch(/\.queue: invalid queue name "bad queue"/);
      expect(await bad('x', { queue: 'q', everyMs: 1000, payload: { big: 'x'.repeat(70_000) } })).toMatch(/\.payload: \d+ bytes of JSON, over the 65536-byte limit/);
      expect(await bad('x', { queue: 'q', everyMs: 1000, tz: 'UTC' })).toMatch(/upsertSchedule\("x"\)\.tz: unknown option/);
      expect(await bad('', { queue: 'q', everyMs: 1000 })).toMatch(/^pg-queue: invalid option upsertSchedule\(""\)\.name: expected a non-empty string/);
      expect(await bad('x', null)).toMatch(/upsertSchedule\("x"\): expected an object/);
      expect(await a.queue.listSchedules()).toEqual(expect.not.arrayContaining([expect.objectContaining({ name: 'x' })]));
    } finally {
      await a.close();
    }
  });
});
