import { Injectable } from '@nestjs/common';
import { InvalidOptionsError, InvalidScheduleError, TaskHandler, type Task } from '@app/pg-queue';
import { tickSchedules } from '@app/pg-queue/testing';
import { dueTicks } from '../../libs/pg-queue/src/schedules/schedule.definition';
import { bootQueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

@Injectable()
class EverySecond {
  @TaskHandler('tick.q', { mode: 'lease', schedule: { everyMs: 1000, payload: { report: 'pulse' } } })
  async tick(_task: Task) {}
}

@Injectable()
class CatchUpOnce {
  @TaskHandler('gap.once', { mode: 'lease', schedule: { everyMs: 1000, missed: 'once' } })
  async run(_task: Task) {}
}

@Injectable()
class SkipMissed {
  @TaskHandler('gap.skip', { mode: 'lease', schedule: { everyMs: 1000, missed: 'skip' } })
  async run(_task: Task) {}
}

@Injectable()
class Hourly {
  @TaskHandler('reports.hourly', { schedule: { cron: '0 * * * *', tz: 'Europe/Berlin' } })
  async run(_task: Task) {}
}

@Injectable()
class BadCron {
  @TaskHandler('bad.cron', { schedule: { cron: '61 * * * *' } })
  async run(_task: Task) {}
}

const ticksOf = (db: TestDatabase, queue: string) =>
  db.sql<{ ms: string }>(
    `SELECT (extract(epoch FROM run_at) * 1000)::bigint::text AS ms FROM pgqueue.task WHERE queue = $1
     UNION ALL SELECT (extract(epoch FROM run_at) * 1000)::bigint::text FROM pgqueue.task_archive WHERE queue = $1 ORDER BY 1`,
    [queue],
  ).then((rows) => rows.map((r) => Number(r.ms)));

describe('schedules', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db.drop());

  it('three instances sharing a 1 s schedule enqueue each tick exactly once', async () => {
    const apps = await Promise.all([0, 1, 2].map((i) => bootQueueApp(db.prisma(4), [EverySecond], { workerId: `i${i}`, databaseUrl: db.url })));
    try {
      // wait (by condition) for 10 ticks
      const until = Date.now() + 30_000;
      while ((await ticksOf(db, 'tick.q')).length < 10) {
        if (Date.now() > until) throw new Error('schedule did not tick');
        await new Promise((r) => setTimeout(r, 200));
      }
    } finally {
      await Promise.all(apps.map((a) => a.close()));
    }
    const ticks = await ticksOf(db, 'tick.q');
    expect(ticks.length).toBeGreaterThanOrEqual(10);
    expect(new Set(ticks).size).toBe(ticks.length); // no tick twice
    for (let i = 1; i < ticks.length; i++) expect(ticks[i] - ticks[i - 1]).toBe(1000); // no tick skipped
    expect(ticks[0] % 1000).toBe(0);
    const [payload] = await db.sql("SELECT payload FROM pgqueue.task_archive WHERE queue = 'tick.q' LIMIT 1");
    expect(payload.payload).toEqual({ report: 'pulse' });
  });

  it.each([
    ['once', CatchUpOnce, 'gap.once', 1],
    ['skip', SkipMissed, 'gap.skip', 0],
  ] as const)('after a minute of downtime, missed: %s enqueues at most one catch-up task, then ticks on time', async (_mode, Handler, queue, catchUps) => {
    // Declared once, then every instance "went down" a minute ago: the stored next tick is old.
    const first = await bootQueueApp(db.prisma(4), [Handler], { autoStart: true });
    await first.close();
    await db.sql("DELETE FROM pgqueue.task WHERE queue = $1", [queue]);
    await db.sql("DELETE FROM pgqueue.task_archive WHERE queue = $1", [queue]);
    await db.sql("UPDATE pgqueue.schedule SET next_run_at = date_trunc('second', now()) - interval '60 seconds' WHERE queue = $1", [queue]);

    const restarted = await bootQueueApp(db.prisma(4), [Handler], { autoStart: false });
    try {
      await tickSchedules(restarted.app);
      const ticks = await ticksOf(db, queue);
      const now = Date.now();
      const old = ticks.filter((t) => t < now - 10_000);
      expect(old).toHaveLength(catchUps); // the missed minute: one catch-up or none, never 60
      const recent = ticks.filter((t) => t >= now - 10_000);
      expect(recent.length).toBeLessThanOrEqual(3); // only the ticks of the on-time window (2 s)
    } finally {
      await restarted.close();
    }
  });

  it('computes missed and on-time ticks for cron with a time zone', () => {
    const s = { cron: '0 * * * *', tz: 'Asia/Kolkata', everyMs: null, missed: 'once' as const };
    // +05:30: the top of the hour in Kolkata is at :30 UTC
    // down since 00:30 UTC, back at 03:30:20: the 03:30 tick is within the on-time window (60 s)
    const back = dueTicks(s, new Date('2026-01-01T00:30:00Z'), new Date('2026-01-01T03:30:20Z'));
    expect(back.fire.map((d) => d.toISOString())).toEqual(['2026-01-01T00:30:00.000Z', '2026-01-01T03:30:00.000Z']);
    expect(back.next.toISOString()).toBe('2026-01-01T04:30:00.000Z');
    // back at 03:40: 03:30 was missed too; one catch-up covers all of them
    const later = dueTicks({ ...s, missed: 'skip' }, new Date('2026-01-01T00:30:00Z'), new Date('2026-01-01T03:40:00Z'));
    expect(later.fire).toEqual([]);
    expect(later.next.toISOString()).toBe('2026-01-01T04:30:00.000Z');
  });

  it('removing a schedule from the code retires it; a bad cron is a startup error naming the handler', async () => {
    const a = await bootQueueApp(db.prisma(2), [Hourly], { autoStart: true });
    await a.close();
    expect(await db.sql("SELECT name, tz FROM pgqueue.schedule WHERE queue = 'reports.hourly'")).toEqual([{ name: 'reports.hourly', tz: 'Europe/Berlin' }]);

    @Injectable()
    class HourlyWithoutSchedule {
      @TaskHandler('reports.hourly')
      async run(_task: Task) {}
    }
    const b = await bootQueueApp(db.prisma(2), [HourlyWithoutSchedule], { autoStart: true });
    await b.close();
    expect(await db.sql("SELECT name FROM pgqueue.schedule WHERE queue = 'reports.hourly'")).toEqual([]);

    const err = await bootQueueApp(db.prisma(2), [BadCron], { autoStart: false }).then(() => null, (e: Error) => e);
    expect(err).toBeInstanceOf(InvalidScheduleError);
    expect(err).toBeInstanceOf(InvalidOptionsError);
    expect(err?.message).toMatch(/^pg-queue: invalid option @TaskHandler\("bad\.cron"\)\.schedule\.cron \(BadCron\.run\): .*minute/);
  });
});

