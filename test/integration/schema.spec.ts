import { Client } from 'pg';
import { migrationSteps, printSchemaSql, schemaMigrations, type SchemaMigration } from '../../libs/pg-queue/src/sql/schema.sql';
import { installSchema } from '../../libs/pg-queue/src/sql/schema.installer';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

describe('schema installation', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase({ queueSchema: false });
  });
  afterAll(() => db.drop());

  it('installs into a configurable schema, and a second run changes nothing', async () => {
    expect(await installSchema(db.prisma(), 'jobs_a')).toEqual(schemaMigrations('jobs_a').map((m) => m.version));
    expect(await installSchema(db.prisma(), 'jobs_a')).toEqual([]);
    const tables = await db.sql("SELECT table_name FROM information_schema.tables WHERE table_schema = 'jobs_a' ORDER BY 1");
    expect(tables.map((t) => t.table_name)).toEqual([
      'backoff',
      'instance_session',
      'limiter_queue',
      'limiter_state',
      'partition_rate',
      'partition_weight',
      'queue_handler',
      'queue_pause',
      'queue_state',
      'rate_window',
      'schedule',
      'schedule_runtime',
      'schema_version',
      'task',
      'task_archive',
      'task_archive_default',
      'task_archive_legacy',
      'task_cancel',
      'task_debounce',
      'task_dependency_debt',
      'task_watch',
      'workflow_child_debt',
      'workflow_signal',
      'workflow_step',
    ]);
  });

  it('the claim index is partial on pending rows', async () => {
    await installSchema(db.prisma(), 'jobs_a');
    const [idx] = await db.sql("SELECT indexdef FROM pg_indexes WHERE schemaname = 'jobs_a' AND indexname = 'task_claim_idx'");
    expect(idx.indexdef).toMatch(/\(queue, priority, run_at, id\) WHERE \(state = 'pending'::text\)/);
  });

  it('printed SQL (for prisma/migrations) creates the same schema and the installer then finds it current', async () => {
    const client = new Client({ connectionString: db.url });
    await client.connect();
    try {
      await client.query(printSchemaSql('jobs_printed'));
    } finally {
      await client.end();
    }
    expect(await installSchema(db.prisma(), 'jobs_printed')).toEqual([]);
    const columns = (schema: string) =>
      db.sql("SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = $1 ORDER BY 1, 2", [schema]);
    await installSchema(db.prisma(), 'jobs_a');
    expect(await columns('jobs_printed')).toEqual(await columns('jobs_a'));
    const constraints = (schema: string) =>
      db.sql('SELECT conname, convalidated, pg_get_constraintdef(c.oid) AS def FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = $1 ORDER BY 1, 3', [schema]);
    expect(await constraints('jobs_printed')).toEqual(await constraints('jobs_a'));
  });

  it('runs migrations with semicolons inside dollar-quoted bodies (DO blocks, functions)', async () => {
    const migrations: SchemaMigration[] = [
      {
        version: 1,
        name: 'plpgsql',
        sql: `
CREATE TABLE jobs_do.item (id int PRIMARY KEY);
DO $$
BEGIN
  INSERT INTO jobs_do.item VALUES (1);
  INSERT INTO jobs_do.item VALUES (2);
END
$$;
CREATE FUNCTION jobs_do.item_count() RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE n bigint;
BEGIN
  SELECT count(*) INTO n FROM jobs_do.item; -- a comment; with a semicolon
  RETURN n;
END;
$fn$;
`,
      },
    ];
    expect(await installSchema(db.prisma(), 'jobs_do', migrations)).toEqual([1]);
    expect(await db.sql('SELECT jobs_do.item_count() AS n')).toEqual([{ n: '2' }]);
  });

  it('a VALIDATE step runs after the NOT VALID step committed: writes to the table go through while it scans', async () => {
    const gate = 7001; // advisory lock the test holds to stop the scan at a known row
    const migrations: SchemaMigration[] = [
      {
        version: 1,
        name: 'items',
        sql: `
CREATE TABLE jobs_gate.item (id int PRIMARY KEY, kind text NOT NULL);
-- Checking a 'held' row waits while the test holds the gate lock.
CREATE FUNCTION jobs_gate.gate(kind text) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN IF kind = 'held' THEN PERFORM pg_advisory_xact_lock_shared(${gate}); END IF; RETURN true; END $$;
INSERT INTO jobs_gate.item VALUES (1, 'held');
`,
      },
      {
        version: 2,
        name: 'gated_check',
        sql: ['ALTER TABLE jobs_gate.item ADD CONSTRAINT item_gate CHECK (jobs_gate.gate(kind)) NOT VALID;', 'ALTER TABLE jobs_gate.item VALIDATE CONSTRAINT item_gate;'],
      },
    ];
    const holder = new Client({ connectionString: db.url });
    const writer = new Client({ connectionString: db.url });
    await Promise.all([holder.connect(), writer.connect()]);
    let install: Promise<number[]> | undefined;
    try {
      // An upgrade: the table and its row exist before the migration that adds the check.
      expect(await installSchema(db.prisma(), 'jobs_gate', migrations.slice(0, 1))).toEqual([1]);
      await holder.query('SELECT pg_advisory_lock($1)', [gate]);
      install = installSchema(db.prisma(), 'jobs_gate', migrations);
      await waitFor(install, async () => (await db.sql("SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND NOT granted", [gate])).length > 0);
      // VALIDATE is now scanning. Had ADD CONSTRAINT's ACCESS EXCLUSIVE lock still been held, the
      // insert would wait for it: lock_timeout turns that wait into an error.
      await writer.query("SET lock_timeout = '10s'");
      await writer.query("INSERT INTO jobs_gate.item VALUES (2, 'free')");
      const validated = () => db.sql("SELECT convalidated FROM pg_constraint WHERE conname = 'item_gate'");
      expect(await validated()).toEqual([{ convalidated: false }]);
      await holder.query('SELECT pg_advisory_unlock($1)', [gate]);
      expect(await install).toEqual([2]);
      expect(await validated()).toEqual([{ convalidated: true }]);
    } finally {
      await Promise.all([holder.end(), writer.end()]); // ending the holder releases the gate
      await install?.catch(() => undefined);
    }
  });

  it('an interrupted migration resumes at its next step without repeating the committed ones', async () => {
    const migrations: SchemaMigration[] = [
      { version: 1, name: 'items', sql: 'CREATE TABLE jobs_resume.item (id int PRIMARY KEY, n int NOT NULL); INSERT INTO jobs_resume.item VALUES (1, -1);' },
      {
        version: 2,
        name: 'positive',
        sql: ['ALTER TABLE jobs_resume.item ADD CONSTRAINT item_positive CHECK (n > 0) NOT VALID;', 'ALTER TABLE jobs_resume.item VALIDATE CONSTRAINT item_positive;'],
      },
    ];
    await expect(installSchema(db.prisma(), 'jobs_resume', migrations)).rejects.toThrow(/item_positive/);
    const state = () =>
      db.sql(
        `SELECT v.version, v.steps_done, c.convalidated FROM jobs_resume.schema_version v
         LEFT JOIN pg_constraint c ON v.version = 2 AND c.conname = 'item_positive' ORDER BY 1`,
      );
    expect(await state()).toEqual([
      { version: 1, steps_done: null, convalidated: null },
      { version: 2, steps_done: 1, convalidated: false },
    ]);
    await db.sql('UPDATE jobs_resume.item SET n = 1');
    // Re-running the first step would fail: the constraint exists.
    expect(await installSchema(db.prisma(), 'jobs_resume', migrations)).toEqual([2]);
    expect(await state()).toEqual([
      { version: 1, steps_done: null, convalidated: null },
      { version: 2, steps_done: null, convalidated: true },
    ]);
  });

  it("the library's migrations validate a NOT VALID constraint in a later step than the one adding it", () => {
    const steps = schemaMigrations('pgqueue').flatMap((m) => migrationSteps(m));
    expect(steps.some((step) => /\bNOT VALID\b/.test(step))).toBe(true);
    for (const step of steps) if (/\bNOT VALID\b/.test(step)) expect(step).not.toMatch(/\bVALIDATE CONSTRAINT\b/);
  });
});

/** Polls `condition` until it holds; fails early with `work`'s error if that settles first. */
async function waitFor(work: Promise<unknown>, condition: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  let settled = false;
  work.then(
    () => (settled = true),
    () => (settled = true),
  );
  const until = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (settled) {
      await work;
      throw new Error('finished before the condition held');
    }
    if (Date.now() > until) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
