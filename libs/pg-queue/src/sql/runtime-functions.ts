import { createHash } from 'node:crypto';
import { quoteIdent } from './identifiers';
import { limitedClaim } from './limited-claim.function';
import { handlerPass } from './handlers.sql';
import { SIGNAL_LOCK_NAMESPACE } from './workflow.sql';

/**
 * SQL functions whose body may change from one release to the next. Not migrations: the installer
 * puts each in place at every start (CREATE OR REPLACE, schema.runtime-functions.ts), so a fix to
 * a body needs no schema version; `printSchemaSql` prints them after the migrations.
 *
 * Rules, because during a rolling deploy old and new instances call the same function:
 * - a body may change; its arguments and result columns may not (instances of the releases before
 *   still call it). Another signature is another function, under another name.
 * - every change of `body` raises `release`. An instance replaces the database's copy only when
 *   its own release is at least the recorded one, so an older instance that starts after a newer
 *   one does not bring its older body back. The unit spec pins each release's hash.
 */
export interface RuntimeFunctionDefinition {
  name: string;
  /** The argument types that identify it (regprocedure's form), e.g. 'integer, text'. */
  args: string;
  /** The schema version whose tables it uses: it is installed only into a schema that has it. */
  requires: number;
  release: number;
  /** CREATE OR REPLACE FUNCTION ..., for the quoted schema name `s` (`schema` unquoted, for statement builders). */
  body: (s: string, schema: string) => string;
}

/** A definition for one schema, with what identifies its text. */
export interface RuntimeFunction {
  name: string;
  /** schema.name(args), as to_regprocedure reads it. */
  identity: string;
  requires: number;
  release: number;
  sql: string;
  /** The first 16 hex digits of the SHA-256 of `sql`. */
  hash: string;
  /** md5 of the body between its $fn$ quotes: what pg_proc.prosrc holds unless edited by hand. */
  srcMd5: string;
  /** Records release and hash in the function's comment: what the next start compares. */
  marker: string;
}

/** The comment's text; `parseMarker` reads it back. */
const markerText = (release: number, hash: string) => `pg-queue runtime function: release ${release}, sha256 ${hash}`;

/** Release and hash recorded in a function's comment; null when it has none (release 0: migration 11's text, a hand edit). */
export function parseMarker(comment: string | null): { release: number; hash: string } | null {
  const m = /^pg-queue runtime function: release (\d+), sha256 ([0-9a-f]+)$/.exec(comment ?? '');
  return m ? { release: Number(m[1]), hash: m[2] } : null;
}

/** `definition` in `schema` as to_regprocedure reads it: schema.name(args). */
export function runtimeFunctionIdentity(schema: string, definition: RuntimeFunctionDefinition): string {
  return `${quoteIdent(schema)}.${definition.name}(${definition.args})`;
}

export function runtimeFunctions(schema: string, definitions: readonly RuntimeFunctionDefinition[] = RUNTIME_FUNCTIONS): RuntimeFunction[] {
  const s = quoteIdent(schema);
  return definitions.map((d) => {
    const sql = d.body(s, schema).trim();
    const hash = createHash('sha256').update(sql).digest('hex').slice(0, 16);
    const identity = runtimeFunctionIdentity(schema, d);
    const src = /\$fn\$([\s\S]*)\$fn\$$/.exec(sql)?.[1];
    if (src === undefined) throw new Error(`runtime function ${d.name}: its body must be quoted $fn$...$fn$, at the end`);
    const srcMd5 = createHash('md5').update(src).digest('hex');
    return { name: d.name, identity, requires: d.requires, release: d.release, sql, hash, srcMd5, marker: `COMMENT ON FUNCTION ${identity} IS '${markerText(d.release, hash)}';` };
  });
}

/** The section printSchemaSql appends after the migrations. */
export function printRuntimeFunctions(schema: string): string[] {
  return runtimeFunctions(schema).map((f) => `-- runtime function ${f.name}, release ${f.release}\n${f.sql};\n${f.marker}`);
}

/**
 * `archive_partitions()`: the archive's range partitions and their upper bounds (the default
 * partition has none).
 */
const archivePartitions: RuntimeFunctionDefinition = {
  name: 'archive_partitions',
  args: '',
  requires: 11,
  release: 1,
  body: (s) => `
CREATE OR REPLACE FUNCTION ${s}.archive_partitions(OUT rel regclass, OUT relname name, OUT upper_bound timestamptz)
RETURNS SETOF record LANGUAGE sql STABLE AS $fn$
  SELECT c.oid::regclass, c.relname, b[1]::timestamptz
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
  CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']+)''\\)') b
  WHERE i.inhparent = '${s}.task_archive'::regclass AND b IS NOT NULL
$fn$`,
};

/**
 * `archive_partition_step(lock_space, lock_name, width_ms, ahead, keep_ms, lock_timeout_ms)`: one
 * change to the archive's partitions per call, or none, so each DDL commits, and drops its locks,
 * on its own. First the advisory lock (lock_space, hashtext(lock_name)), tried, not awaited, and
 * held to the end of the transaction: `ran` false means another instance holds it and nothing was
 * done. (Taken here, not in the calling statement: the planner is free to run a function in FROM
 * before a filter on the lock's result.) Then, in order:
 * - drop the oldest range partition whose upper bound is older than keep_ms. `tasks` is then the
 *   planner's estimate of its rows (pg_class.reltuples, as of its last ANALYZE or VACUUM; NULL if
 *   it never had one), not a count: that would read the whole partition just before dropping it;
 * - else create the next partition, `width_ms` wide and aligned to multiples of it since the epoch
 *   (daily: UTC midnights), while the ranges end less than `ahead` widths from now. It starts where
 *   the last one ends (so a changed width never overlaps), or at the current period; a period the
 *   default partition already holds rows of is left to it, as attaching it would fail.
 * Creation is CREATE TABLE (LIKE ...) plus ATTACH PARTITION: ATTACH takes SHARE UPDATE EXCLUSIVE on
 * task_archive, which completions' inserts do not wait for, and ACCESS EXCLUSIVE on the new table
 * and the default partition (which it scans: empty, as a rule), where CREATE TABLE ... PARTITION OF
 * takes ACCESS EXCLUSIVE on task_archive. Both it and DROP wait at most lock_timeout_ms for their
 * locks; past it the step gives up (`busy`, its DDL rolled back) and the next round tries again.
 * An instance of an older release, which expects a count, adds the estimate to what it reports:
 * harmless.
 */
const archivePartitionStep: RuntimeFunctionDefinition = {
  name: 'archive_partition_step',
  args: 'integer, text, bigint, integer, bigint, integer',
  requires: 11,
  release: 2,
  body: (s) => `
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
      SELECT CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint END INTO tasks FROM pg_class c WHERE c.oid = expired.rel;
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
END $fn$`,
};

/** In the order they are installed. */
/**
 * `workflow_signal_committed()`: the deferred constraint trigger of workflow_signal (migration 27),
 * run once per signal at its sender's commit, inside that transaction: a workflow parked on that
 * signal goes back to pending, and its queue's workers hear of it at the commit. The signal lock
 * (see workflow.sql.ts) is taken here, for the moment of the commit only, not for the sender's whole
 * transaction: a park takes it before its snapshot, so the park either sees the committed signal or
 * has committed before this update, which then finds it parked. The row is taken SKIP LOCKED: a
 * commit never waits for another transaction that holds the workflow's row (one that enqueued a
 * task depending on it); the waker's pass (wakeDue) wakes such a workflow instead.
 */
const workflowSignalCommitted: RuntimeFunctionDefinition = {
  name: 'workflow_signal_committed',
  args: '',
  requires: 27,
  release: 1,
  body: (s) => workflowSignalCommittedSql(s),
};

/** workflow_signal_committed's text; the migration that adds its trigger creates it with this text too. */
export function workflowSignalCommittedSql(s: string): string {
  return `
CREATE OR REPLACE FUNCTION ${s}.workflow_signal_committed() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  woke text;
BEGIN
  PERFORM pg_advisory_xact_lock(${SIGNAL_LOCK_NAMESPACE}, hashtext(NEW.task_id::text));
  UPDATE ${s}.task t SET state = 'pending', run_at = now(), wake_at = NULL, waiting_for = NULL
  WHERE t.id = (SELECT w.id FROM ${s}.task w
                WHERE w.id = NEW.task_id AND w.state = 'waiting' AND w.waiting_for = 'signal:' || NEW.name
                FOR UPDATE SKIP LOCKED)
  RETURNING t.queue INTO woke;
  IF woke IS NOT NULL THEN PERFORM pg_notify(TG_TABLE_SCHEMA || '_task_ready', woke); END IF;
  RETURN NULL;
END
$fn$`;
}

export const RUNTIME_FUNCTIONS: readonly RuntimeFunctionDefinition[] = [archivePartitions, archivePartitionStep, limitedClaim, workflowSignalCommitted, handlerPass];
