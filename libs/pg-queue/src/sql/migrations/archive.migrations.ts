import type { SchemaMigration } from '../schema.sql';

/**
 * Migration 11: `task_archive` becomes a table partitioned by range of finished_at, so retention
 * drops whole partitions (a catalog change) instead of deleting rows one by one.
 * `s`: the quoted schema name. See schema.sql.ts for how migrations are applied.
 *
 * Decisions:
 * - No primary key on the partitioned table: one would have to include finished_at, and every
 *   reader looks tasks up by id alone. Each partition has its own PRIMARY KEY (id) instead, so an id
 *   lookup is one index probe per partition (the archive keeps about archiveMs / width + 5 of them),
 *   flat in the number of rows. Ids stay unique across partitions by construction: they come from
 *   task's identity, and a task leaves the hot table, for good, in the statement that archives it.
 * - The existing table is not copied: it becomes the first partition, `task_archive_legacy`, for
 *   everything before a bound T (the next UTC midnight plus a day, or the day after the newest
 *   row's finish if that is later: VALIDATE never meets a row past T), without a scan or an index
 *   build, so an archive of any size converts in milliseconds of locking:
 *   1. a CHECK (finished_at < T) NOT VALID: catalog only, and from then on enforced for new rows,
 *      which finish now, before T;
 *   2. VALIDATE it: a scan under SHARE UPDATE EXCLUSIVE, which lets completions keep archiving. A
 *      `long` step: no transaction or statement timeout, however large the archive;
 *   3. one transaction renames the table, creates the partitioned one and attaches the old table
 *      FROM (MINVALUE) TO (T): the validated check proves the partition bound (no scan), and its
 *      indexes match the partitioned ones (no build). Plus a DEFAULT partition, so an insert that
 *      no range covers still lands somewhere: from step 3 on, no finish time fails an insert.
 * - Between steps 1 and 3 the CHECK is the one state of an upgrade that breaks later: once T
 *   passes, every insert into the archive (every completion, every cancel) would fail. So it is
 *   `transient`: when step 2 or 3 fails, the installer drops the CHECK and records the migration as
 *   not started; and when it finds the migration stopped after step 1 (a killed process) with less
 *   than a day left before T, it drops the CHECK and starts over with a new T. Only an upgrade
 *   killed after step 1 and not started again for a day or more keeps it until T (startup logs
 *   and the health indicator report an unfinished upgrade).
 *   On a fresh install the legacy partition is just the first one (the archive's first day or two).
 * - Partitions from T on are created ahead, and dropped, by the retention pruner through
 *   archive_partition_step (created by step 4, since replaced by a runtime function:
 *   runtime-functions.ts; maintain.sql.ts says which locks it takes and why).
 */
export function archiveMigrations(s: string): SchemaMigration[] {
  return [
    {
      version: 11,
      name: 'archive_partitions',
      sql: [
        `
DO $$ BEGIN
  EXECUTE format('ALTER TABLE ${s}.task_archive ADD CONSTRAINT task_archive_legacy_bound CHECK (finished_at < %L) NOT VALID',
                 greatest(date_trunc('day', now(), 'UTC') + interval '2 days',
                          date_trunc('day', (SELECT max(finished_at) FROM ${s}.task_archive), 'UTC') + interval '1 day'));
END $$;
`,
        { sql: `ALTER TABLE ${s}.task_archive VALIDATE CONSTRAINT task_archive_legacy_bound;`, run: 'long' },
        `
ALTER TABLE ${s}.task_archive RENAME TO task_archive_legacy;
ALTER INDEX ${s}.task_archive_pkey RENAME TO task_archive_legacy_pkey;
ALTER INDEX ${s}.task_archive_finished_idx RENAME TO task_archive_legacy_finished_idx;
ALTER INDEX ${s}.task_archive_parent_idx RENAME TO task_archive_legacy_parent_idx;
CREATE TABLE ${s}.task_archive (
  id            bigint      NOT NULL,
  queue         text        NOT NULL,
  state         text        NOT NULL CONSTRAINT task_archive_state_check CHECK (state IN ('done', 'cancelled')),
  payload       jsonb       NOT NULL,
  priority      integer     NOT NULL,
  run_at        timestamptz NOT NULL,
  attempt       integer     NOT NULL,
  max_attempts  integer,
  last_error    text,
  parent_id     bigint,
  created_at    timestamptz NOT NULL,
  started_at    timestamptz,
  finished_at   timestamptz NOT NULL,
  dedup_key     text,
  group_key     text,
  trace_context jsonb,
  partition_key text,
  depends_on    bigint[],
  dependants    bigint[],
  result        jsonb
) PARTITION BY RANGE (finished_at);
-- Pruning of the default partition, per-hour throughput, the dashboard's newest rows; and pipelines.
CREATE INDEX task_archive_finished_idx ON ${s}.task_archive (finished_at);
CREATE INDEX task_archive_parent_idx ON ${s}.task_archive (parent_id) WHERE parent_id IS NOT NULL;
DO $$ BEGIN
  EXECUTE format('ALTER TABLE ${s}.task_archive ATTACH PARTITION ${s}.task_archive_legacy FOR VALUES FROM (MINVALUE) TO (%L)',
    (SELECT (regexp_match(pg_get_constraintdef(oid), '''([^'']+)'''))[1] FROM pg_constraint
     WHERE conname = 'task_archive_legacy_bound' AND conrelid = '${s}.task_archive_legacy'::regclass));
END $$;
ALTER TABLE ${s}.task_archive_legacy DROP CONSTRAINT task_archive_legacy_bound;
-- Rows no range partition covers (a period the pruner did not create in time) land here; the
-- pruner deletes them row by row once past retention.
CREATE TABLE ${s}.task_archive_default PARTITION OF ${s}.task_archive (PRIMARY KEY (id)) DEFAULT;
`,
        archivePartitionStep(s),
      ],
      transient: {
        from: 1,
        to: 2,
        undo: `ALTER TABLE ${s}.task_archive DROP CONSTRAINT IF EXISTS task_archive_legacy_bound;`,
        // Stopped before VALIDATE (which may take long) with less than a day left before T, or
        // without its CHECK (dropped by hand).
        stale: `
SELECT v.steps_done = 1 AND coalesce(
         (SELECT (regexp_match(pg_get_constraintdef(c.oid), '''([0-9]{4}-[^'']+)'''))[1]::timestamptz < now() + interval '1 day'
          FROM pg_constraint c WHERE c.conname = 'task_archive_legacy_bound' AND c.conrelid = '${s}.task_archive'::regclass),
         true) AS stale
FROM ${s}.schema_version v WHERE v.version = 11`,
      },
    },
  ];
}

/**
 * Step 4 as migration 11 ran it, kept as it was: the functions' current bodies, and what they do,
 * are in runtime-functions.ts, which the installer puts in place over these (same names and
 * signatures) once the schema is current.
 */
function archivePartitionStep(s: string): string {
  return `
-- The archive's range partitions and their upper bounds (the default partition has none).
CREATE OR REPLACE FUNCTION ${s}.archive_partitions(OUT rel regclass, OUT relname name, OUT upper_bound timestamptz)
RETURNS SETOF record LANGUAGE sql STABLE AS $fn$
  SELECT c.oid::regclass, c.relname, b[1]::timestamptz
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
  CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']+)''\\)') b
  WHERE i.inhparent = '${s}.task_archive'::regclass AND b IS NOT NULL
$fn$;

CREATE OR REPLACE FUNCTION ${s}.archive_partition_step(lock_space integer, lock_name text, width_ms bigint, ahead integer,
  keep_ms bigint, lock_timeout_ms integer, OUT ran boolean, OUT action text, OUT partition_name text, OUT tasks bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  width interval := width_ms * interval '1 millisecond';
  expired record;
  lo timestamptz;
  hi timestamptz;
BEGIN
  ran := pg_try_advisory_xact_lock(lock_space, hashtext(lock_name));
  IF NOT ran THEN RETURN; END IF;
  PERFORM set_config('lock_timeout', lock_timeout_ms || 'ms', true);
  BEGIN
    SELECT p.rel, p.relname INTO expired FROM ${s}.archive_partitions() p
    WHERE p.upper_bound <= now() - keep_ms * interval '1 millisecond' ORDER BY p.upper_bound LIMIT 1;
    IF FOUND THEN
      partition_name := expired.relname;
      EXECUTE format('SELECT count(*) FROM %s', expired.rel) INTO tasks;
      EXECUTE format('DROP TABLE %s', expired.rel);
      action := 'dropped';
      RETURN;
    END IF;
    lo := greatest((SELECT max(upper_bound) FROM ${s}.archive_partitions()),
                   to_timestamp(floor(extract(epoch FROM now()) * 1000 / width_ms) * width_ms / 1000.0));
    LOOP
      IF lo >= now() + ahead * width THEN RETURN; END IF;
      hi := to_timestamp(floor(extract(epoch FROM lo) * 1000 / width_ms) * width_ms / 1000.0) + width;
      EXIT WHEN NOT EXISTS (SELECT 1 FROM ${s}.task_archive_default WHERE finished_at >= lo AND finished_at < hi);
      lo := hi;
    END LOOP;
    partition_name := 'task_archive_p' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD_HH24MISS');
    EXECUTE format('CREATE TABLE ${s}.%I (LIKE ${s}.task_archive INCLUDING DEFAULTS INCLUDING CONSTRAINTS, PRIMARY KEY (id))', partition_name);
    EXECUTE format('ALTER TABLE ${s}.task_archive ATTACH PARTITION ${s}.%I FOR VALUES FROM (%L) TO (%L)', partition_name, lo, hi);
    action := 'created';
    tasks := 0;
  EXCEPTION WHEN lock_not_available THEN
    action := 'busy';
    tasks := 0;
  END;
END $fn$;
`;
}
