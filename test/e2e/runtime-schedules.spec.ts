/**
 * Schedules created at run time (issue 27, item 4): `queue.upsertSchedule` / `getSchedule` /
 * `listSchedules` / `removeSchedule`, stored in the `schedule` table beside the declared ones and
 * ticked by the same SKIP LOCKED pass, so every tick is enqueued once across instances.
 */
import { Injectable } from '@nestjs/common';
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
    expect((await db.sql("SELECT name FROM pgqueue.schedule WHERE queue = 'rt.declared' ORDER BY name")).map((r) => r.name)).toEqual(['declared.extra', 'nightly']);

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
    expect(await db.sql("SELECT queue FROM pgqueue.schedule WHERE name = 'declared.extra'")).toEqual([{ queue: 'rt.declared' }]);
  });

  it('migration 21 on a database that has declared schedules: existing rows become declared ones (origin code)', async () => {
    await db.sql("INSERT INTO pgqueue.schedule (name, queue, every_ms, next_run_at) VALUES ('old.one', 'rt.old', 60000, now() + interval '1 minute')");
    // Back to the schema before migration 21, its row in place.
    await db.sql('ALTER TABLE pgqueue.schedule DROP COLUMN origin');
    await db.sql('DELETE FROM pgqueue.schema_version WHERE version = 21');
    const a = await bootQueueApp(db.prisma(2), [], { autoStart: false });
    try {
      expect(await db.sql("SELECT origin FROM pgqueue.schedule WHERE name = 'old.one'")).toEqual([{ origin: 'code' }]);
      expect(await a.queue.getSchedule('old.one')).toMatchObject({ declared: true, everyMs: 60_000 });
      await expect(a.queue.removeSchedule('old.one')).rejects.toThrow(ScheduleNameTakenError);
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
