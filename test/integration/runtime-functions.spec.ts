/**
 * Runtime functions (sql/runtime-functions.ts): SQL functions whose body may change from one
 * release to the next, the pruner's archive_partition_step first, are put in place by the
 * installer at every start (CREATE OR REPLACE), without a schema version, under its advisory lock
 * and lock_timeout; an older instance starting after a newer one keeps the newer body.
 */
import { Client } from 'pg';
import { installSchema, type InstallOptions } from '../../libs/pg-queue/src/sql/schema.installer';
import { RUNTIME_FUNCTIONS, parseMarker, runtimeFunctions } from '../../libs/pg-queue/src/sql/runtime-functions';
import { printSchemaSql, schemaMigrations } from '../../libs/pg-queue/src/sql/schema.sql';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

const SCHEMA = 'pgqueue';
const step = (schema: string) => `${schema}.archive_partition_step(integer, text, bigint, integer, bigint, integer)`;
const quiet: InstallOptions['logger'] = { log: () => undefined, warn: () => undefined };

/** The library's list with archive_partition_step's body changed, at a higher release. */
const nextRelease = (schema: string) =>
  runtimeFunctions(
    schema,
    RUNTIME_FUNCTIONS.map((d) =>
      d.name === 'archive_partition_step' ? { ...d, release: d.release + 1, body: (s: string, schema: string) => d.body(s, schema).replace("action := 'created';", "action := 'created anew';") } : d,
    ),
  );

describe('runtime functions', () => {
  let db: TestDatabase;
  /** The function as the database holds it: its text, its comment's marker, and its row version (changed by any replace). */
  const installed = async (schema = SCHEMA) => {
    const [row] = await db.sql(`SELECT prosrc, obj_description(oid, 'pg_proc') AS comment, xmin::text FROM pg_proc WHERE oid = to_regprocedure($1)`, [step(schema)]);
    return row ? { src: row.prosrc as string, marker: parseMarker(row.comment), xmin: row.xmin as string } : null;
  };
  const library = (schema = SCHEMA) => runtimeFunctions(schema).find((f) => f.name === 'archive_partition_step')!;
  const versions = () => db.sql(`SELECT version, steps_done FROM ${SCHEMA}.schema_version ORDER BY 1`);

  beforeAll(async () => {
    db = await createTestDatabase({ queueSchema: false });
    await installSchema(db.prisma(), SCHEMA, undefined, { logger: quiet });
  });
  afterAll(() => db.drop());

  it("a start puts the library's body of archive_partition_step back in a database at the latest schema version, without a new schema version", async () => {
    const before = await versions();
    // Another body, as an earlier release (migration 11) or a hand edit left it.
    await db.sql(`CREATE OR REPLACE FUNCTION ${SCHEMA}.archive_partition_step(lock_space integer, lock_name text, width_ms bigint, ahead integer,
      keep_ms bigint, lock_timeout_ms integer, OUT ran boolean, OUT action text, OUT partition_name text, OUT tasks bigint)
      LANGUAGE plpgsql AS $fn$ BEGIN ran := true; action := 'stale body'; END $fn$`);
    expect(await installSchema(db.prisma(), SCHEMA, undefined, { logger: quiet })).toEqual([]);
    const [result] = await db.sql(`SELECT ran, action FROM ${SCHEMA}.archive_partition_step(1, 'x', 86400000, 3, 86400000, 100)`);
    expect(result.action).not.toBe('stale body');
    expect(await installed()).toMatchObject({ marker: { release: library().release, hash: library().hash } });
    expect(await versions()).toEqual(before);
  });

  it('a start that finds them current changes nothing', async () => {
    const before = await installed();
    expect(await installSchema(db.prisma(), SCHEMA, undefined, { logger: quiet })).toEqual([]);
    expect(await installed()).toEqual(before);
  });

  it('a body changed in the list, at a higher release, is applied by the next start; an older instance starting later keeps it', async () => {
    const before = await versions();
    const messages: string[] = [];
    const logger = { log: (m: string) => messages.push(m), warn: (m: string) => messages.push(m) };
    await installSchema(db.prisma(), SCHEMA, undefined, { logger, runtimeFunctions: nextRelease(SCHEMA) });
    const newer = await installed();
    expect(newer?.src).toMatch(/created anew/);
    expect(newer?.marker?.release).toBe(library().release + 1);
    expect(messages).toContain(`schema install: runtime function archive_partition_step updated from release ${library().release} to release ${library().release + 1}`);
    expect(await versions()).toEqual(before);

    // The previous release starts (a rolling deploy, or a rollback of one instance).
    messages.length = 0;
    await installSchema(db.prisma(), SCHEMA, undefined, { logger });
    expect(await installed()).toEqual(newer);
    expect(messages.join('\n')).toMatch(/archive_partition_step is at release \d+, newer than this instance's \d+: kept/);
  });

  it('an upgrade from schema version 10 ends with the library\'s bodies; a schema without version 11 gets none', async () => {
    await installSchema(db.prisma(), 'jobs_up', schemaMigrations('jobs_up').filter((m) => m.version <= 10), { logger: quiet });
    expect(await installed('jobs_up')).toBeNull();
    await installSchema(db.prisma(), 'jobs_up', undefined, { logger: quiet });
    const fns = await db.sql(
      `SELECT p.proname, obj_description(p.oid, 'pg_proc') AS comment FROM pg_proc p WHERE p.pronamespace = 'jobs_up'::regnamespace ORDER BY 1`,
    );
    expect(fns.map((f) => [f.proname, parseMarker(f.comment)])).toEqual(
      runtimeFunctions('jobs_up').map((f) => [f.name, { release: f.release, hash: f.hash }]).sort(([a], [b]) => String(a).localeCompare(String(b))),
    );
  });

  it('the printed SQL holds them, recorded: the installer then finds them current', async () => {
    await db.sql(printSchemaSql('jobs_printed')); // one simple query, as psql -f sends a file
    const printed = await installed('jobs_printed');
    expect(printed?.marker).toEqual({ release: library('jobs_printed').release, hash: library('jobs_printed').hash });
    expect(await installSchema(db.prisma(), 'jobs_printed', undefined, { logger: quiet })).toEqual([]);
    expect(await installed('jobs_printed')).toEqual(printed);
  });

  it("waits for the function's lock at most lockTimeoutMs, retries, and completes once the holder is gone", async () => {
    await db.sql(`COMMENT ON FUNCTION ${step(SCHEMA)} IS NULL`); // to be replaced on the next start
    const holder = new Client({ connectionString: db.url });
    await holder.connect();
    const messages: string[] = [];
    let install: Promise<number[]> | undefined;
    try {
      await holder.query('BEGIN');
      await holder.query(`COMMENT ON FUNCTION ${step(SCHEMA)} IS 'a hand edit in progress'`);
      install = installSchema(db.prisma(), SCHEMA, undefined, { lockTimeoutMs: 100, backoffMs: 50, logger: { log: () => undefined, warn: (m) => messages.push(m) } });
      const until = Date.now() + 30_000;
      while (!messages.some((m) => /the runtime functions gave up waiting for its locks/.test(m)) && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
      await holder.query('ROLLBACK');
      expect(await install).toEqual([]);
    } finally {
      await holder.end();
      await install?.catch(() => undefined);
    }
    expect(messages.join('\n')).toMatch(/the runtime functions gave up waiting for its locks \(lock_timeout 100 ms/);
    expect((await installed())?.marker).toEqual({ release: library().release, hash: library().hash });
  });
});
