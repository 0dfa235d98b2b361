/**
 * Who a rescuer pass takes for dead (rescueGone in liveness.sql.ts), by the rows of
 * instance_session as each kind of instance leaves them: a session gone while its instance says
 * nothing (its silent window), gone while its instance says it is reconnecting (not judged until
 * that runs out), a row of an older version (no silent window: its grace), one registered on
 * another server (a failover or restart since: its grace), and a judge not yet trusted (its own
 * LISTEN connection lost lately: everyone's grace). Each case starts from empty tables. Sessions are pg clients carrying the
 * listener's application_name; each instance holds one running task. Then InstanceLiveness, which
 * writes these rows: what it says while its LISTEN connection is down, and when it is trusted.
 */
import { Client } from 'pg';
import { Logger } from '@nestjs/common';
import { LivenessRepository } from '../../libs/pg-queue/src/sql/liveness.repository';
import { InstanceLiveness, RECONNECTING_FOR_MS, TRUSTED_AFTER_MS, reconnectingEveryMs } from '../../libs/pg-queue/src/worker/instance.liveness';
import { TaskRepository } from '../../libs/pg-queue/src/sql/task.repository';
import { installSchema } from '../../libs/pg-queue/src/sql/schema.installer';
import { taskRow } from '../support/task-rows';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

describe('the liveness verdict: silent window, reconnecting, older rows, untrusted judges', () => {
  let db: TestDatabase;
  const liveness = new LivenessRepository('pgqueue');
  const tasks = new TaskRepository('pgqueue', 'archive');
  const sessions: Client[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    await installSchema(db.prisma(), 'pgqueue');
  });
  beforeEach(async () => {
    await db.sql('DELETE FROM pgqueue.instance_session');
    await db.sql('DELETE FROM pgqueue.task');
  });
  afterAll(async () => {
    for (const c of sessions) await c.end().catch(() => undefined);
    await db.drop();
  });

  /** A session named `listener` on the test database, as a LISTEN connection would be. */
  const openSession = async (listener: string) => {
    const c = new Client({ connectionString: db.url, application_name: listener });
    await c.connect();
    sessions.push(c);
    return c;
  };
  /** Registers `instance` with its session up, then gives it one running task; returns the session. */
  const instance = async (name: string, windows: { graceMs: number; silentMs: number }) => {
    const session = await openSession(`listener ${name}`);
    expect(await liveness.register(db.prisma(), name, `listener ${name}`, windows)).toBe(true);
    const [id] = await tasks.insert(db.prisma(), [taskRow('lv.q', { payloadJson: JSON.stringify({ name }) })]);
    await db.sql(
      "UPDATE pgqueue.task SET state = 'running', attempt = 1, locked_by = $2, lease_token = gen_random_uuid(), locked_until = now() + interval '1 hour', started_at = now() WHERE id = $1",
      [id, name],
    );
    return session;
  };
  const running = async (name: string) => (await db.sql("SELECT 1 FROM pgqueue.task WHERE state = 'running' AND locked_by = $1", [name])).length;
  /** The session ended, and found gone by a first pass `agoMs` ago (what that pass would have set). */
  const goneSince = async (name: string, session: Client, agoMs: number) => {
    await session.end();
    await db.sql("UPDATE pgqueue.instance_session SET missing_since = now() - $2 * interval '1 millisecond' WHERE instance = $1", [name, agoMs]);
  };

  it('a silent instance is dead after its silent window by a trusted judge, after its grace by one not yet trusted', async () => {
    const s = await instance('lv-silent', { graceMs: 10_000, silentMs: 500 });
    await goneSince('lv-silent', s, 1000);
    const untrusted = await liveness.rescueGone(db.prisma(), 'judge', false);
    expect(untrusted.rescued).toBe(0);
    expect(untrusted.nextCheckMs).toBeGreaterThan(8000); // its grace, from missing_since
    expect(await running('lv-silent')).toBe(1);
    const trusted = await liveness.rescueGone(db.prisma(), 'judge', true);
    expect(trusted).toMatchObject({ rescued: 1, gone: 1 });
    expect(await running('lv-silent')).toBe(0);
  });

  it('one that says it is reconnecting is not judged until that runs out, however long its session is gone', async () => {
    const s = await instance('lv-reconnecting', { graceMs: 10_000, silentMs: 500 });
    await s.end();
    await liveness.reconnecting(db.prisma(), 'lv-reconnecting', 3000);
    await db.sql("UPDATE pgqueue.instance_session SET missing_since = now() - interval '1 hour' WHERE instance = 'lv-reconnecting'");
    const pass = await liveness.rescueGone(db.prisma(), 'judge', true);
    expect(pass.rescued).toBe(0);
    expect(pass.nextCheckMs).toBeGreaterThan(2000);
    expect(pass.nextCheckMs).toBeLessThanOrEqual(3000);
    expect(await running('lv-reconnecting')).toBe(1);
    // It stopped saying so (died while reconnecting): dead once its word ran out.
    await db.sql("UPDATE pgqueue.instance_session SET reconnecting_until = now() - interval '1 millisecond' WHERE instance = 'lv-reconnecting'");
    expect(await liveness.rescueGone(db.prisma(), 'judge', true)).toMatchObject({ rescued: 1, gone: 1 });
  });

  /**
   * Instance `name`, its row changed by `change` (SQL SET clause), gone 1 s: not judged by a
   * trusted judge within its 3 s grace, judged once gone 4 s.
   */
  const judgedByGrace = async (name: string, change: string) => {
    const s = await instance(name, { graceMs: 3000, silentMs: 500 });
    await db.sql(`UPDATE pgqueue.instance_session SET ${change} WHERE instance = $1`, [name]);
    await goneSince(name, s, 1000);
    expect((await liveness.rescueGone(db.prisma(), 'judge', true)).rescued).toBe(0);
    await db.sql("UPDATE pgqueue.instance_session SET missing_since = now() - interval '4 seconds' WHERE instance = $1", [name]);
    expect(await liveness.rescueGone(db.prisma(), 'judge', true)).toMatchObject({ rescued: 1, gone: 1 });
  };

  it('one registered on another server (a restart or failover since) is judged by its grace, even by a trusted judge', async () => {
    await judgedByGrace('lv-moved', "server_started = server_started - interval '1 day'");
  });

  it("an older version's row (no silent window) is judged by its grace, even by a trusted judge; re-registering clears everything", async () => {
    await judgedByGrace('lv-older', 'silent_ms = NULL');

    // Back (a new session, registered anew): live again, with no trace of the absence.
    await openSession('listener lv-back');
    await liveness.register(db.prisma(), 'lv-back', 'listener lv-back', { graceMs: 10_000, silentMs: 500 });
    await db.sql("UPDATE pgqueue.instance_session SET missing_since = now() - interval '1 hour', reconnecting_until = now() + interval '1 hour' WHERE instance = 'lv-back'");
    await liveness.register(db.prisma(), 'lv-back', 'listener lv-back', { graceMs: 10_000, silentMs: 500 });
    expect(await db.sql("SELECT missing_since, reconnecting_until, silent_ms, grace_ms FROM pgqueue.instance_session WHERE instance = 'lv-back'")).toEqual([
      { missing_since: null, reconnecting_until: null, silent_ms: 500, grace_ms: 10_000 },
    ]);
  });

  it('a judge never judges itself', async () => {
    const s = await instance('lv-self', { graceMs: 1000, silentMs: 250 });
    await goneSince('lv-self', s, 60_000);
    expect((await liveness.rescueGone(db.prisma(), 'lv-self', true)).rescued).toBe(0);
    expect(await running('lv-self')).toBe(1);
  });

  it('InstanceLiveness: trusted from its first registration; once its LISTEN connection was lost, says it reconnects until back (then no more), and is trusted again only after a while', async () => {
    const name = 'lv-instance';
    const live = new InstanceLiveness(db.prisma(), liveness, name, `listener ${name}`, 400, new Logger('test'));
    const says = jest.spyOn(liveness, 'reconnecting');
    const row = async () =>
      (await db.sql('SELECT silent_ms, grace_ms, reconnecting_until > now() + interval \'5 seconds\' AS reconnecting FROM pgqueue.instance_session WHERE instance = $1', [name]))[0];
    try {
      let session = await openSession(`listener ${name}`);
      await live.connected();
      expect(await row()).toEqual({ silent_ms: 400, grace_ms: 10_000, reconnecting: null });
      expect(live.trusted()).toBe(true); // a process that never lost its LISTEN connection

      // Lost: it says at once, then every reconnectingEveryMs (100 ms for a 400 ms window), for RECONNECTING_FOR_MS; pg-listen's repeated reports start nothing more.
      await session.end();
      live.lost();
      live.lost();
      expect(live.trusted()).toBe(false);
      await waitFor('it to say it reconnects', async () => (await row()).reconnecting === true);
      await waitFor('it to say it again', async () => says.mock.calls.length >= 3);
      expect(reconnectingEveryMs(400)).toBe(100);
      expect(RECONNECTING_FOR_MS).toBeGreaterThan(5000);

      // Back: registered anew (after its last say), no longer saying so, and trusted only TRUSTED_AFTER_MS later.
      session = await openSession(`listener ${name}`);
      await live.connected();
      const saidBefore = says.mock.calls.length;
      expect(await row()).toEqual({ silent_ms: 400, grace_ms: 10_000, reconnecting: null });
      await new Promise((r) => setTimeout(r, 500));
      expect(says.mock.calls.length).toBe(saidBefore);
      expect(live.trusted()).toBe(false);
      const now = Date.now();
      const clock = jest.spyOn(Date, 'now').mockReturnValue(now + TRUSTED_AFTER_MS + 1);
      try {
        expect(live.trusted()).toBe(true);
      } finally {
        clock.mockRestore();
      }

      // Lost again, then retired: the says stop and the row is gone.
      await session.end();
      live.lost();
      await live.retire();
      const saidAtRetire = says.mock.calls.length;
      await new Promise((r) => setTimeout(r, 300));
      expect(says.mock.calls.length).toBe(saidAtRetire);
      expect(await db.sql('SELECT 1 FROM pgqueue.instance_session WHERE instance = $1', [name])).toEqual([]);
    } finally {
      says.mockRestore();
    }
  });
});
