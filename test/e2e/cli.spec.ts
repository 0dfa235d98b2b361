/**
 * The `pg-queue` command line, spawned as a user runs it (through the SWC hook instead of a build),
 * against a database with tasks in every state: output, --json, exit codes, and one clear line for
 * a database it cannot use.
 */
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { Injectable } from '@nestjs/common';
import { NonRetryableError, TaskHandler, type Task, type TaskContext } from '@app/pg-queue';
import { drainQueue } from '@app/pg-queue/testing';
import { portNobodyListensOn } from '../support/free-port';
import { bootQueueApp, type QueueApp } from '../support/queue-app';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

const ROOT = path.resolve(__dirname, '..', '..');

@Injectable()
class CliHandlers {
  @TaskHandler('cli.work')
  async work(task: Task<{ fail?: string }>) {
    if (task.payload.fail) throw new NonRetryableError(task.payload.fail);
  }

  @TaskHandler('cli.report', { backoff: { type: 'fixed', delayMs: 0 } })
  async report(task: Task, ctx: TaskContext) {
    ctx.log(`attempt ${task.attempt} here`);
    ctx.progress({ done: 3 * task.attempt, of: 8 });
    if (task.attempt === 1) throw new Error('flaky upstream');
  }
}

interface Run {
  code: number | null;
  out: string;
  err: string;
}

describe('pg-queue CLI', () => {
  let db: TestDatabase;
  let qa: QueueApp;
  const ids: Record<string, string> = {};

  /** `pg-queue ...args` with DATABASE_URL set to the test database unless `env` says otherwise. */
  const cli = (args: string[], { env = {}, entry = 'main' }: { env?: NodeJS.ProcessEnv; entry?: string } = {}): Run => {
    const res = spawnSync(process.execPath, ['-r', path.join(ROOT, 'test/support/ts-register.js'), path.join(ROOT, `libs/pg-queue/src/cli/${entry}.ts`), ...args], {
      cwd: ROOT,
      env: { ...process.env, DATABASE_URL: db.url, ...env },
      encoding: 'utf8',
      timeout: 60_000,
    });
    return { code: res.status, out: res.stdout, err: res.stderr };
  };

  beforeAll(async () => {
    db = await createTestDatabase();
    qa = await bootQueueApp(db.prisma(4), [CliHandlers], { autoStart: false });
    ids.done = await qa.queue.enqueue('cli.work', {});
    ids.dead = await qa.queue.enqueue('cli.work', { fail: 'card declined' });
    ids.dead2 = await qa.queue.enqueue('cli.work', { fail: 'gateway timeout' });
    await drainQueue(qa.app);
    ids.pending = await qa.queue.enqueue('cli.work', {}, { delayMs: 3_600_000 });
    // A join whose parent is dead: cancelled at once, and it stays in the task table.
    ids.join = await qa.queue.enqueue('cli.join', {}, { dependsOn: [ids.dead] });
  });
  afterAll(async () => {
    await qa.close();
    await db.drop();
  });

  it('stats and list, as text and as JSON', () => {
    const stats = cli(['stats']);
    expect(stats).toMatchObject({ code: 0, err: '' });
    expect(stats.out).toMatch(/^queue\s+pending\s+waiting\s+running\s+dead\s+done\s+cancelled\s+oldestDueMs\ncli\.join\s+0\s+0\s+0\s+0\s+0\s+1\s+-\ncli\.work\s+1\s+0\s+0\s+2\s+1\s+0\s+-\n$/);
    const json = cli(['--json', 'list', '--queue', 'cli.work', '--state', 'dead']);
    expect(json.code).toBe(0);
    const dead = JSON.parse(json.out) as { id: string; state: string; lastError: string }[];
    expect(dead.map((t) => t.id).sort()).toEqual([ids.dead, ids.dead2].sort());
    expect(dead.every((t) => t.state === 'dead' && t.lastError.startsWith('NonRetryableError'))).toBe(true);
    const page = cli(['list', '--limit', '2']);
    expect(page.out.trim().split('\n')).toHaveLength(3); // header + 2
  });

  it('stats and backoffs show a back-off in force with its end time', async () => {
    expect(cli(['backoffs'])).toMatchObject({ code: 0, out: 'no cooldowns\n' });
    // As a handler's RateLimitedError records it (backoff.sql.ts; the e2e backoff.spec drives that path).
    await db.sql(
      `INSERT INTO pgqueue.backoff (scope, name, partition_key, until, task_id, reason)
       VALUES ('queue', 'cli.work', '', '2099-01-02T03:04:05Z', 1, 'RateLimitedError: 429'), ('limiter', 'stripe', '', '2099-01-02T03:04:05Z', 1, NULL)`,
    );
    try {
      const stats = cli(['stats']);
      expect(stats.out).toMatch(/^queue\s+pending.*oldestDueMs\s+cooldownUntil\n/);
      expect(stats.out).toMatch(/\ncli\.work\s.*\s2099-01-02T03:04:05\.000Z\n/);
      const listed = cli(['backoffs']);
      expect(listed.out).toMatch(/^scope\s+name\s+partition\s+until\s+reason\nqueue\s+cli\.work\s+2099-01-02T03:04:05\.000Z\s+RateLimitedError: 429\nlimiter\s+stripe/);
      expect(JSON.parse(cli(['--json', 'backoffs']).out)).toEqual([
        { scope: 'queue', name: 'cli.work', partition: null, until: '2099-01-02T03:04:05.000Z', reason: 'RateLimitedError: 429' },
        { scope: 'limiter', name: 'stripe', partition: null, until: '2099-01-02T03:04:05.000Z', reason: null },
      ]);
    } finally {
      await db.sql('DELETE FROM pgqueue.backoff');
    }
  });

  it('show <id>: the task; an unknown id exits 1, a malformed one 2', () => {
    const shown = cli(['--json', 'show', ids.done]);
    expect(shown.code).toBe(0);
    expect(JSON.parse(shown.out)).toMatchObject({ id: ids.done, state: 'done', queue: 'cli.work', chain: [{ id: ids.done, stage: 0 }] });
    expect(cli(['show', '99999999'])).toMatchObject({ code: 1, out: '', err: 'pg-queue: no task 99999999\n' });
    const bad = cli(['show', 'abc']);
    expect({ code: bad.code, err: bad.err }).toEqual({ code: 2, err: 'pg-queue: invalid argument "id": expected a task id (a positive bigint as a decimal string), got "abc"\n' });
  });

  it('retry, retry-dead by error text, cancel: what they did, and exit 1 when there was nothing to do', async () => {
    expect(cli(['retry', ids.dead])).toMatchObject({ code: 0, out: `task ${ids.dead} is pending again\n` });
    expect((await qa.queue.get(ids.dead))?.state).toBe('pending');
    expect(cli(['retry', ids.dead]).code).toBe(1); // pending now: nothing to retry
    const revived = cli(['--json', 'retry-dead', '--queue', 'cli.work', '--error-like', '%timeout%']);
    expect({ code: revived.code, body: JSON.parse(revived.out) }).toEqual({ code: 0, body: { queue: 'cli.work', retried: [ids.dead2] } });
    expect(cli(['retry-dead', '--queue', 'cli.work']).code).toBe(1);
    // retry-dead leaves cancelled tasks alone; a join cancelled by its dead parent cannot be retried.
    expect(cli(['retry-dead', '--queue', 'cli.join']).code).toBe(1);
    expect(cli(['retry', ids.join])).toMatchObject({ code: 1, out: '', err: expect.stringMatching(new RegExp(`^pg-queue: task ${ids.join} cannot be retried: .*\\b${ids.dead}\\b`)) });
    expect((await qa.queue.get(ids.join))?.state).toBe('cancelled');
    expect(cli(['cancel', ids.pending])).toMatchObject({ code: 0, out: `task ${ids.pending} cancelled\n` });
    expect(cli(['cancel', ids.pending]).code).toBe(1);
  });

  it('promote, reschedule and update-payload change a task that has not run, and refuse with the reason (exit 1) otherwise', async () => {
    const id = await qa.queue.enqueue('cli.change', { v: 1 }, { delayMs: 3_600_000 });
    expect(cli(['update-payload', id, '{"v":2}'])).toMatchObject({ code: 0, out: `task ${id} has its new payload\n` });
    expect((await qa.queue.get(id))?.payload).toEqual({ v: 2 });
    expect(cli(['reschedule', id, '--at', '2030-01-02T03:04:05Z'])).toMatchObject({ code: 0, out: `task ${id} is due at 2030-01-02T03:04:05.000Z\n` });
    expect((await qa.queue.get(id))?.runAt.toISOString()).toBe('2030-01-02T03:04:05.000Z');
    const json = cli(['--json', 'reschedule', id, '--in', '2h']);
    expect({ code: json.code, body: JSON.parse(json.out) }).toEqual({ code: 0, body: { id, result: 'changed' } });
    expect(cli(['promote', id])).toMatchObject({ code: 0, out: `task ${id} is due now\n` });
    expect((await qa.queue.get(id))!.runAt.getTime()).toBeLessThanOrEqual(Date.now() + 1000);
    // Refused: finished, unknown; usage errors exit 2.
    expect(cli(['promote', ids.done])).toMatchObject({ code: 1, out: '', err: `pg-queue: task ${ids.done} not promoted: it has finished\n` });
    expect(cli(['update-payload', '99999999', '{}'])).toMatchObject({ code: 1, err: 'pg-queue: task 99999999 not changed: it does not exist\n' });
    expect(cli(['update-payload', id, '{oops'])).toMatchObject({ code: 2, err: expect.stringContaining('expected JSON') });
    expect(cli(['reschedule', id])).toMatchObject({ code: 2, err: 'pg-queue: reschedule needs --at <time> or --in <duration>\n' });
    expect(cli(['reschedule', id, '--at', 'soon']).code).toBe(2);
    await db.sql('DELETE FROM pgqueue.task WHERE id = $1', [id]); // leaves the later tests' counts as they were
  });

  it('its bounded actions run under READ COMMITTED on a database whose default is REPEATABLE READ', async () => {
    const id = await qa.queue.enqueue('cli.change', { v: 1 }, { delayMs: 3_600_000 });
    await db.sql(`ALTER DATABASE ${db.name} SET default_transaction_isolation = 'repeatable read'`);
    try {
      expect(cli(['promote', id])).toMatchObject({ code: 0, out: `task ${id} is due now\n` });
    } finally {
      await db.sql(`ALTER DATABASE ${db.name} RESET default_transaction_isolation`);
      await db.sql('DELETE FROM pgqueue.task WHERE id = $1', [id]);
    }
  });

  it('purge deletes finished history older than the given age, never live tasks', async () => {
    expect(cli(['purge']).code).toBe(2); // --older-than is required
    expect(cli(['purge', '--older-than', 'soon']).code).toBe(2);
    const none = cli(['purge', '--older-than', '1d']);
    expect(none).toMatchObject({ code: 0, out: '0 tasks deleted\n' });
    await db.sql("UPDATE pgqueue.task_archive SET finished_at = now() - interval '2 days'");
    const purged = cli(['--json', 'purge', '--queue', 'cli.work', '--older-than', '1d']);
    expect({ code: purged.code, body: JSON.parse(purged.out) }).toEqual({ code: 0, body: { deleted: 2 } }); // the done one and the cancelled one
    expect(await db.sql('SELECT count(*)::int AS n FROM pgqueue.task_archive')).toEqual([{ n: 0 }]);
    expect(await db.sql("SELECT state FROM pgqueue.task WHERE queue = 'cli.work' ORDER BY id")).toEqual([{ state: 'pending' }, { state: 'pending' }]);
  });

  it('schedules upsert, list, show and remove (issue 27): a bad cron or payload exits 2, an unknown name 1, a declared one is refused', async () => {
    const created = cli(['schedules', 'upsert', 'cli.nightly', '--queue', 'cli.work', '--cron', '0 3 * * *', '--timezone', 'Europe/Berlin', '--payload', '{"report":"daily"}']);
    expect(created).toEqual({ code: 0, out: 'schedule cli.nightly created\n', err: '' });
    expect(await qa.queue.getSchedule('cli.nightly')).toMatchObject({ queue: 'cli.work', cron: '0 3 * * *', timezone: 'Europe/Berlin', payload: { report: 'daily' }, declared: false });
    expect(cli(['schedules', 'upsert', 'cli.nightly', '--queue', 'cli.work', '--every', '90s'])).toEqual({ code: 0, out: 'schedule cli.nightly changed\n', err: '' });
    const list = cli(['schedules', 'list']);
    expect(list.code).toBe(0);
    expect(list.out).toMatch(/^name\s+queue\s+every\s+cron\s+timezone\s+missed\s+nextRunAt\s+lastRunAt\s+declared\ncli\.nightly\s+cli\.work\s+90s\s+-\s+-\s+skip\s+\S+Z\s+-\s+no\n$/);
    const shown = cli(['--json', 'schedules', 'show', 'cli.nightly']);
    expect({ code: shown.code, body: JSON.parse(shown.out) }).toMatchObject({ code: 0, body: { name: 'cli.nightly', everyMs: 90_000, cron: null, payload: {}, declared: false } });

    const badCron = cli(['schedules', 'upsert', 'cli.bad', '--queue', 'cli.work', '--cron', '61 * * * *']);
    expect({ code: badCron.code, out: badCron.out }).toEqual({ code: 2, out: '' });
    expect(badCron.err).toMatch(/^pg-queue: invalid option upsertSchedule\("cli\.bad"\)\.cron: .*\n$/);
    expect(cli(['schedules', 'upsert', 'cli.bad', '--queue', 'cli.work', '--every', '1m', '--payload', '{oops'])).toMatchObject({ code: 2, err: expect.stringContaining('--payload') });
    expect(cli(['schedules', 'upsert', 'cli.bad', '--queue', 'cli.work']).code).toBe(2); // neither --cron nor --every
    expect(await qa.queue.getSchedule('cli.bad')).toBeNull();

    expect(cli(['schedules', 'remove', 'cli.nightly'])).toEqual({ code: 0, out: 'schedule cli.nightly removed\n', err: '' });
    expect(cli(['schedules', 'remove', 'cli.nightly'])).toEqual({ code: 1, out: '', err: 'pg-queue: no schedule cli.nightly\n' });
    expect(cli(['schedules', 'show', 'cli.nightly'])).toEqual({ code: 1, out: '', err: 'pg-queue: no schedule cli.nightly\n' });
    expect(cli(['schedules', 'list'])).toEqual({ code: 0, out: 'no schedules\n', err: '' });

    // A declared schedule is listed, and the CLI cannot change or remove it.
    await db.sql("INSERT INTO pgqueue.schedule (name, queue, every_ms, next_run_at) VALUES ('cli.declared', 'cli.work', 60000, now() + interval '1 minute')");
    expect(cli(['schedules', 'list']).out).toMatch(/\ncli\.declared\s+cli\.work\s+1m\s.*\syes\n$/);
    expect(cli(['schedules', 'remove', 'cli.declared'])).toEqual({ code: 2, out: '', err: 'pg-queue: schedule "cli.declared" is declared in code; change it there, or give the runtime schedule another name\n' });
    await db.sql("DELETE FROM pgqueue.schedule WHERE name = 'cli.declared'");
  });

  it('schema print and install; pg-queue-schema is the same program', async () => {
    const printed = cli(['--schema', 'cli_q', 'schema', 'print']);
    expect(printed.code).toBe(0);
    expect(printed.out).toContain('CREATE TABLE "cli_q".task (');
    // The runtime functions too (no schema version), recorded as the installer records them.
    expect(printed.out).toMatch(/-- runtime function archive_partition_step, release \d+\nCREATE OR REPLACE FUNCTION "cli_q"\.archive_partition_step\([\s\S]*\nCOMMENT ON FUNCTION "cli_q"\.archive_partition_step\(/);
    expect(cli(['--schema', 'cli_q', 'schema', 'install'])).toMatchObject({ code: 0, out: expect.stringMatching(/^applied migrations 1, 2, 3/) });
    expect(cli(['--schema', 'cli_q', 'schema', 'install'])).toMatchObject({ code: 0, out: 'schema current: nothing to do\n' });
    expect(cli(['app_queue'], { entry: 'print-schema' }).out).toContain('CREATE TABLE "app_queue".task (');
    const help = cli(['--help'], { entry: 'print-schema' });
    expect({ code: help.code, usage: help.out.split('\n')[0] }).toEqual({ code: 0, usage: 'Usage: pg-queue schema print [options]' });
    expect(cli(['Bad-Name'], { entry: 'print-schema' })).toMatchObject({ code: 2, err: expect.stringMatching(/^pg-queue: invalid option schema: /) });
  });

  it('--help everywhere, --version, usage errors exit 2', () => {
    const help = cli(['--help']);
    expect(help.code).toBe(0);
    expect(help.out).toContain('Exit codes: 0 done; 1 not found');
    for (const command of ['stats', 'cooldowns', 'list', 'show', 'logs', 'retry', 'retry-dead', 'cancel', 'purge', 'schedules', 'schema']) expect(help.out).toContain(`  ${command}`);
    expect(cli(['purge', '--help']).out).toContain('--older-than <duration>');
    expect(cli(['--version']).out).toMatch(/^\d+\.\d+\.\d+\n$/);
    expect(cli(['list', '--state', 'finished']).code).toBe(2);
    expect(cli(['--nonsense']).code).toBe(2);
  });

  it("logs <id>: the task's lines and failed attempts; list shows progress (issue 27)", async () => {
    const id = await qa.queue.enqueue('cli.report', {});
    await drainQueue(qa.app, 'cli.report');
    await drainQueue(qa.app, 'cli.report');
    const logs = cli(['logs', id]);
    expect(logs.code).toBe(0);
    expect(logs.out).toMatch(/^\S+Z  attempt 1  attempt 1 here\n\S+Z  attempt 1  failed after \d+ ms: Error: flaky upstream\n[\s\S]*\S+Z  attempt 2  attempt 2 here\n$/);
    expect(JSON.parse(cli(['--json', 'logs', id]).out)).toMatchObject([{ attempt: 1, kind: 'log' }, { attempt: 1, kind: 'error' }, { attempt: 2, kind: 'log', message: 'attempt 2 here', durationMs: null }]);
    expect(cli(['logs', '99999999'])).toMatchObject({ code: 1, err: 'pg-queue: no task 99999999\n' });
    expect(cli(['list', '--queue', 'cli.report']).out).toMatch(/^id\s+queue\s+state\s+attempt\s+progress\s+runAt.*\n\d+\s+cli\.report\s+done\s+2\s+6\/8 \(75%\)\s/);
    expect(JSON.parse(cli(['--json', 'show', id]).out)).toMatchObject({ progress: { done: 6, of: 8 } });
  });

  it('a database it cannot use is one line naming host and port, never the password, and exit 3', async () => {
    const port = await portNobodyListensOn();
    const down = cli(['stats'], { env: { DATABASE_URL: `postgresql://app:s3cret@127.0.0.1:${port}/shop` } });
    expect(down).toEqual({ code: 3, out: '', err: `pg-queue: cannot use PostgreSQL at 127.0.0.1:${port}/shop (connection refused)\n` });
    expect(cli(['stats'], { env: { DATABASE_URL: '' } })).toMatchObject({ code: 3, err: expect.stringMatching(/^pg-queue: no database: pass --database-url or set DATABASE_URL/) });
    expect(cli(['--database-url', 'mysql://x/y', 'stats'])).toMatchObject({ code: 3 });
  });
});
