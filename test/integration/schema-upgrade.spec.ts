/**
 * Upgrades that cannot stop the fleet (schema.installer.ts): every DDL step waits for its locks at
 * most lockTimeoutMs (and retries, a bounded number of times), so the fleet's statements never queue
 * behind a step that waits for an old instance's long transaction; index builds on the live tables
 * run CONCURRENTLY; and migration 11's CHECK, the one state of an upgrade that fails inserts once
 * its bound passes, never outlives a failed upgrade.
 */
import { Client } from 'pg';
import { installSchema, schemaUpgradeState, type InstallOptions } from '../../libs/pg-queue/src/sql/schema.installer';
import { migrationSteps, schemaMigrations, type SchemaMigration } from '../../libs/pg-queue/src/sql/schema.sql';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

const SCHEMA = 'pgqueue';
const upTo10 = () => schemaMigrations(SCHEMA).filter((m) => m.version <= 10);
/** The library's migrations from 11 on, as an upgrade from 10 applies them. */
const from11 = () => schemaMigrations(SCHEMA).filter((m) => m.version >= 11).map((m) => m.version);
const quiet: InstallOptions['logger'] = { log: () => undefined, warn: () => undefined };

/** An archive row as an earlier release wrote it; finished at `finishedAt` (SQL). */
const archiveInsert = (id: number, finishedAt: string) =>
  `INSERT INTO ${SCHEMA}.task_archive (id, queue, state, payload, priority, run_at, attempt, created_at, finished_at)
   VALUES (${id}, 'up.q', 'done', '{}', 0, now(), 1, now(), ${finishedAt})`;

/** Test-only migrations after the library's: a catalog change of task, an index built on it, one dropped. */
const taskMigrations = (from: number): SchemaMigration[] => [
  { version: from, name: 'probe_column', sql: `ALTER TABLE ${SCHEMA}.task ADD COLUMN IF NOT EXISTS upgrade_probe text;` },
  {
    version: from + 1,
    name: 'probe_index',
    sql: [
      { sql: `CREATE INDEX IF NOT EXISTS task_upgrade_probe_idx ON ${SCHEMA}.task (queue, upgrade_probe) WHERE upgrade_probe IS NOT NULL;`, run: 'concurrently' },
      { sql: `DROP INDEX IF EXISTS ${SCHEMA}.task_retrying_idx;`, run: 'concurrently' },
    ],
  },
];

/**
 * Enqueues in a loop on its own connection, as the business code of an instance does (an insert
 * into task, and the look-up of dependsOn parents in the archive), until stopped; records how long
 * each transaction took.
 */
async function enqueueLoop(db: TestDatabase) {
  const client = new Client({ connectionString: db.url, application_name: 'business-enqueue' });
  await client.connect();
  const durations: number[] = [];
  let stop = false;
  const done = (async () => {
    while (!stop) {
      const started = Date.now();
      await client.query('BEGIN');
      await client.query(`SELECT id FROM ${SCHEMA}.task_archive WHERE id = ANY ('{1,2}'::bigint[])`);
      await client.query(`INSERT INTO ${SCHEMA}.task (queue, payload) VALUES ('up.business', '{}')`);
      await client.query('COMMIT');
      durations.push(Date.now() - started);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  return {
    durations,
    async stop() {
      stop = true;
      await done.finally(() => client.end());
    },
  };
}

/**
 * An old-version instance's transactional batch: it claimed a task (its update of task) and
 * archived another (its insert into the archive), and holds both until `release()`.
 */
async function oldBatch(db: TestDatabase) {
  const client = new Client({ connectionString: db.url, application_name: 'old-batch' });
  await client.connect();
  await client.query('BEGIN');
  await client.query(`UPDATE ${SCHEMA}.task SET attempt = attempt + 1 WHERE queue = 'up.held'`);
  await client.query(archiveInsert(900_001, 'now()'));
  let released: Promise<void> | undefined;
  return {
    release() {
      released ??= client.query('COMMIT').then(() => client.end());
      return released;
    },
  };
}

async function waitUntil(what: string, condition: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > until) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('schema upgrades under a running fleet', () => {
  let db: TestDatabase;
  beforeEach(async () => {
    db = await createTestDatabase({ queueSchema: false });
    await installSchema(db.prisma(), SCHEMA, upTo10());
    await db.sql(`INSERT INTO ${SCHEMA}.task (queue, payload) VALUES ('up.held', '{}')`);
    await db.sql(archiveInsert(1, "now() - interval '2 days'"));
    await db.sql(archiveInsert(2, "now() - interval '1 hour'"));
  });
  afterEach(() => db.drop());

  it("10 to the latest while an old instance's batch holds task and the archive: enqueues never wait behind the upgrade's DDL, which completes once the batch ends", async () => {
    const lockTimeoutMs = 500;
    const batch = await oldBatch(db);
    const business = await enqueueLoop(db);
    const messages: string[] = [];
    const migrations = [...schemaMigrations(SCHEMA), ...taskMigrations(100)];
    let install: Promise<number[]> | undefined;
    try {
      install = installSchema(db.prisma(), SCHEMA, migrations, {
        lockTimeoutMs,
        logger: { log: (m) => messages.push(m), warn: (m) => messages.push(m) },
      });
      // The batch holds for several lock timeouts: the installer gives up its lock waits and retries.
      await new Promise((r) => setTimeout(r, 6000));
      expect(await db.sql(`SELECT version, steps_done FROM ${SCHEMA}.schema_version WHERE version >= 11`)).toEqual([]);
      await batch.release();
      expect(await install).toEqual([...from11(), 100, 101]);
    } finally {
      await batch.release();
      await business.stop();
      await install?.catch(() => undefined);
    }
    // Without lock_timeout the ALTER TABLE of migration 11 waits for the batch (6 s), and every
    // enqueue that reads the archive queues behind it for as long. Generous margin: 4 s.
    expect(business.durations.length).toBeGreaterThan(10);
    expect(Math.max(...business.durations)).toBeLessThan(lockTimeoutMs + 4000);
    expect(messages.join('\n')).toMatch(/lock_timeout/);

    // The upgrade is complete, the new index valid, and nothing breaks afterwards.
    expect(await db.sql(`SELECT relkind::text FROM pg_class WHERE oid = '${SCHEMA}.task_archive'::regclass`)).toEqual([{ relkind: 'p' }]);
    expect(await db.sql(`SELECT indisvalid FROM pg_index WHERE indexrelid = '${SCHEMA}.task_upgrade_probe_idx'::regclass`)).toEqual([{ indisvalid: true }]);
    expect(await db.sql(`SELECT to_regclass('${SCHEMA}.task_retrying_idx') AS idx`)).toEqual([{ idx: null }]);
    await db.sql(archiveInsert(900_002, "now() + interval '3 days'"));
    await db.sql(archiveInsert(900_003, "now() + interval '400 days'"));
    await db.sql(`INSERT INTO ${SCHEMA}.task (queue, payload, upgrade_probe) VALUES ('up.after', '{}', 'x')`);
    expect(await installSchema(db.prisma(), SCHEMA, migrations, { logger: quiet })).toEqual([]);
  });

  it('builds an index CONCURRENTLY: writes to task go on while the build waits for a long transaction, and an invalid index left by an interrupted build is rebuilt', async () => {
    await installSchema(db.prisma(), SCHEMA, schemaMigrations(SCHEMA), { logger: quiet });
    // An interrupted CONCURRENTLY build of the same name left an invalid index behind.
    await db.sql(`INSERT INTO ${SCHEMA}.task (queue, payload) VALUES ('up.dup', '{}'), ('up.dup', '{}')`);
    expect(await installSchema(db.prisma(), SCHEMA, [...schemaMigrations(SCHEMA), ...taskMigrations(100).slice(0, 1)], { logger: quiet })).toEqual([100]);
    await db.sql(`UPDATE ${SCHEMA}.task SET upgrade_probe = 'same' WHERE queue = 'up.dup'`);
    await expect(db.sql(`CREATE UNIQUE INDEX CONCURRENTLY task_upgrade_probe_idx ON ${SCHEMA}.task (queue, upgrade_probe) WHERE upgrade_probe IS NOT NULL`)).rejects.toThrow();
    await db.sql(`UPDATE ${SCHEMA}.task SET upgrade_probe = NULL`);
    expect(await db.sql(`SELECT indisvalid FROM pg_index WHERE indexrelid = '${SCHEMA}.task_upgrade_probe_idx'::regclass`)).toEqual([{ indisvalid: false }]);

    const batch = await oldBatch(db);
    const business = await enqueueLoop(db);
    let install: Promise<number[]> | undefined;
    try {
      install = installSchema(db.prisma(), SCHEMA, [...schemaMigrations(SCHEMA), ...taskMigrations(100)], { lockTimeoutMs: 500, logger: quiet });
      // The build waits for the batch (its snapshot), without holding back the writes to task.
      await waitUntil('the concurrent build waiting', async () =>
        (await db.sql(`SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE '%INDEX CONCURRENTLY%' AND wait_event_type = 'Lock'`)).length > 0,
      );
      const before = business.durations.length;
      await waitUntil('enqueues while the build waits', async () => business.durations.length > before + 5);
      expect(await db.sql(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'business-enqueue' AND wait_event_type = 'Lock'`)).toEqual([{ n: 0 }]);
      await batch.release();
      expect(await install).toEqual([101]);
    } finally {
      await batch.release();
      await business.stop();
      await install?.catch(() => undefined);
    }
    expect(await db.sql(`SELECT indisvalid, indisunique FROM pg_index WHERE indexrelid = '${SCHEMA}.task_upgrade_probe_idx'::regclass`)).toEqual([
      { indisvalid: true, indisunique: false },
    ]);
  });

  it("migration 11's bound cannot break inserts later: a failed upgrade takes its CHECK back, and the partitions take any finish time afterwards", async () => {
    // Step 2 (VALIDATE) waits for a gate the test holds, and its backend is terminated there: the
    // upgrade fails with step 1 (the CHECK, NOT VALID) committed.
    const gate = 7117;
    const m11 = schemaMigrations(SCHEMA).find((m) => m.version === 11)!;
    const gated: SchemaMigration = {
      ...m11,
      sql: migrationSteps(m11).map((step, i) => (i === 1 ? `SELECT pg_advisory_xact_lock(${gate}); ${step}` : step)),
    };
    const holder = new Client({ connectionString: db.url });
    await holder.connect();
    try {
      await holder.query('SELECT pg_advisory_lock($1)', [gate]);
      const install = installSchema(db.prisma(), SCHEMA, [...upTo10(), gated], { lockTimeoutMs: 60_000, logger: quiet });
      await waitUntil('step 2 waiting for the gate', async () =>
        (await db.sql("SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND objid = $1 AND NOT granted", [gate])).length > 0,
      );
      expect(await db.sql(`SELECT steps_done FROM ${SCHEMA}.schema_version WHERE version = 11`)).toEqual([{ steps_done: 1 }]);
      await db.sql("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND objid = $1 AND NOT granted", [gate]);
      await expect(install).rejects.toThrow();
    } finally {
      await holder.end();
    }
    // Tasks finishing three days from now (the upgrade left as it is) still archive.
    expect(await db.sql(`SELECT conname FROM pg_constraint WHERE conrelid = '${SCHEMA}.task_archive'::regclass AND contype = 'c' AND conname LIKE '%legacy%'`)).toEqual([]);
    await db.sql(archiveInsert(900_010, "now() + interval '3 days'"));

    // The next start runs migration 11 from its first step, and completes it.
    expect(await installSchema(db.prisma(), SCHEMA, schemaMigrations(SCHEMA), { logger: quiet })).toEqual(from11());
    expect(await db.sql(`SELECT tableoid::regclass::text AS part FROM ${SCHEMA}.task_archive WHERE id = 900010`)).toEqual([
      { part: `${SCHEMA}.task_archive_legacy` },
    ]);
    // The first partition's bound lies past every row it holds, and whatever finishes after it,
    // however far ahead, has a partition: the default one when no range covers it.
    for (const [id, at] of [
      [900_011, "now() + interval '3 days'"],
      [900_012, "now() + interval '30 days'"],
      [900_013, "now() + interval '400 days'"],
    ] as const) {
      await db.sql(archiveInsert(id, at));
    }
    expect(await db.sql(`SELECT count(*)::int AS n FROM ${SCHEMA}.task_archive WHERE id > 900000`)).toEqual([{ n: 4 }]);
  });

  it('a migration 11 found stopped after its CHECK with little time left before the bound starts over with a new one', async () => {
    // As a killed process left it: step 1 committed with a bound an hour away.
    await db.sql(`DO $$ BEGIN
      EXECUTE format('ALTER TABLE ${SCHEMA}.task_archive ADD CONSTRAINT task_archive_legacy_bound CHECK (finished_at < %L) NOT VALID', now() + interval '1 hour');
    END $$`);
    await db.sql(`INSERT INTO ${SCHEMA}.schema_version (version, name, steps_done) VALUES (11, 'archive_partitions', 1)`);
    // What the health indicator reads: unfinished, and no installer at work.
    expect(await schemaUpgradeState(db.prisma(), SCHEMA)).toEqual([{ version: 11, name: 'archive_partitions', stepsDone: 1, since: expect.any(Date), installing: false }]);
    const messages: string[] = [];
    expect(await installSchema(db.prisma(), SCHEMA, schemaMigrations(SCHEMA), { logger: { log: (m) => messages.push(m), warn: (m) => messages.push(m) } })).toEqual(from11());
    expect(await schemaUpgradeState(db.prisma(), SCHEMA)).toEqual([]);
    expect(messages.join('\n')).toMatch(/migration 11.*unfinished/);
    const [{ days }] = await db.sql(
      `SELECT extract(epoch FROM upper_bound - now()) / 86400 AS days FROM ${SCHEMA}.archive_partitions() WHERE relname = 'task_archive_legacy'`,
    );
    expect(Number(days)).toBeGreaterThan(1);
  });
});
