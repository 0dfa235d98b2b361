/**
 * A configuration mistake fails startup before the queue touches the database, with an
 * InvalidOptionsError naming the option's full path, and leaves nothing open: the process of an app
 * whose bootstrap failed (and that never called app.close()) ends by itself at once. The Prisma
 * pool's idle connections would keep it alive for 10 s (pg's idle timeout) had the schema install
 * used them first.
 */
import { startFixtureProcess, killFixtureProcesses } from '../support/fixture-process';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { within } from '../support/wait-for';

describe('a startup with a configuration mistake', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase({ queueSchema: false });
  });
  afterAll(async () => {
    await killFixtureProcesses();
    await db.drop();
  });

  it.each([
    ['a handler schedule with a bad cron', 'cron', 'InvalidScheduleError', /^pg-queue: invalid option @TaskHandler\("startup\.cron"\)\.schedule\.cron \(BadCron\.tick\): /],
    ['a bad @TaskHandler option', 'option', 'HandlerConfigurationError', /^pg-queue: invalid option @TaskHandler\("startup\.option"\)\.concurrency \(BadOption\.run\): expected an integer in \[1, 1000\], got 0$/],
    ['a bad queues[...] option', 'queue-option', 'HandlerConfigurationError', /^pg-queue: invalid option queues\["startup\.noop"\]\.timeoutMs: expected an integer/],
    ['two schedules with one name', 'schedule-names', 'InvalidScheduleError', /^pg-queue: invalid option schedules\[1\]\.name: two schedules are named "twice"$/],
  ])('%s: fails with an InvalidOptionsError before touching the database, and the process ends by itself', async (_, flaw, kind, message) => {
    const app = startFixtureProcess('startup-app', [JSON.stringify({ url: db.url, installSchema: true, flaw })]);
    try {
      const line = await app.line('STARTUP FAILED', 30_000);
      const classes = JSON.parse((await app.line('FAILURE CLASSES')).slice('FAILURE CLASSES '.length)) as string[];
      const exit = await within(app.exited, 5_000, 'still running 5 s after the failure');
      const schemas = await db.sql<{ n: number }>("SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = 'pgqueue'");
      expect({ message: JSON.parse(line.slice('STARTUP FAILED '.length)), classes, exit, queueSchemaInstalled: schemas[0].n > 0 }).toEqual({
        message: expect.stringMatching(message),
        classes: [kind, 'InvalidOptionsError', 'PgQueueError', 'Error'],
        exit: { code: 1, signal: null },
        queueSchemaInstalled: false,
      });
    } finally {
      await app.kill();
      await db.sql('DROP SCHEMA IF EXISTS pgqueue CASCADE'); // each case starts from a database the queue never touched
    }
  }, 60_000);

  it('a start that fails part-way (installSchema: false, schema missing) stops what it had started, and the process ends by itself', async () => {
    // The database is reachable, so the LISTEN connection opens; syncing the schedules then fails.
    const app = startFixtureProcess('startup-app', [JSON.stringify({ url: db.url, installSchema: false })]);
    try {
      const line = await app.line('STARTUP FAILED', 30_000);
      const exit = await within(app.exited, 5_000, 'still running 5 s after the failure');
      expect({ message: JSON.parse(line.slice('STARTUP FAILED '.length)), exit }).toEqual({
        message: expect.stringContaining('pgqueue'),
        exit: { code: 1, signal: null },
      });
    } finally {
      await app.kill();
    }
  }, 60_000);

  it('without the mistake the same app starts (the fixture is not broken)', async () => {
    const app = startFixtureProcess('startup-app', [JSON.stringify({ url: db.url, installSchema: true })]);
    try {
      await app.line('READY', 30_000);
      expect(await within(app.exited, 15_000, 'still running 15 s after closing')).toEqual({ code: 0, signal: null });
    } finally {
      await app.kill();
    }
  }, 60_000);
});
