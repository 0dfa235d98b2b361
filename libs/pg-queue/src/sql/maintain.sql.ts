import { debtsCte } from './dependencies.sql';
import { toldCte } from './watch.sql';
import { quoteIdent } from './identifiers';
import { appendedLog, failureEntry } from './task-report.sql';
import { ATTEMPT_LIMIT, cancelRequestedOf, notifyCte, marked } from './fragments.sql';

/** First key of the pruner's advisory lock; the second is hashtext(schema). */
const PRUNE_LOCK_NAMESPACE = 0x70_67_72; // "pgr"

/**
 * How long the archive's partition DDL waits for its locks. DROP TABLE of a partition needs ACCESS
 * EXCLUSIVE on task_archive, and while it waits, every statement that touches the archive (the
 * completions' inserts among them) queues behind it; attaching a new partition only holds back
 * reads of the default partition. 100 ms bounds that stall, and is far longer than the archive's
 * ordinary lock holders (a completion commits within milliseconds of its insert). Behind a longer
 * holder (stats() reading every row) the step gives up and a later round retries: drops can wait,
 * and partitions are created several periods ahead.
 */
const PARTITION_DDL_LOCK_TIMEOUT_MS = 100;

/**
 * A rescue: the running tasks `candidates` picks (ids, locked FOR UPDATE SKIP LOCKED, so a live
 * transactional handler's rows are skipped) go back to pending, or to dead when the lost attempt
 * was the last one (the attempt was counted at its claim: a task that kills its worker every time
 * cannot loop forever), or to cancelled when that was asked for; their lease is gone, so a late
 * completion of the lost attempt is refused by its token. The lost attempt's log entry says so
 * (its `ms`: since its claim). `ctes` go before `candidates` (which may
 * read them), `extra` adds result columns (which may read them). Parameters: $1 batch limit,
 * $2 channel; the CTEs may use more.
 */
export function rescueFrom(s: string, { ctes = '', candidates, lastError, extra = '' }: { ctes?: string; candidates: string; lastError: string; extra?: string }): string {
  return `
WITH ${ctes ? `${ctes},
` : ''}expired AS (${candidates}
), rescued AS (
  UPDATE ${s}.task t
  SET state = CASE WHEN ${cancelRequestedOf(s)} THEN 'cancelled'
                   WHEN t.attempt >= ${ATTEMPT_LIMIT} THEN 'dead' ELSE 'pending' END,
      last_error = ${lastError},
      log = ${appendedLog('t.log', failureEntry(lastError, '(extract(epoch FROM now() - t.started_at) * 1000)::bigint'))},
      locked_by = NULL, lease_token = NULL, locked_until = NULL,
      run_at = now(), finished_at = now()
  -- By primary key (see claim.sql.ts for why not a join).
  WHERE t.id = ANY (ARRAY (SELECT id FROM expired))
  RETURNING t.id, t.queue, t.state, t.run_at, t.dependants, t.workflow_parents, t.watched
), uncancel AS (
  DELETE FROM ${s}.task_cancel c USING rescued r WHERE c.task_id = r.id AND r.state = 'cancelled'
), ${debtsCte(s, "SELECT id, dependants, workflow_parents, state AS outcome, NULL::jsonb AS result FROM rescued WHERE state IN ('dead', 'cancelled')", '$2')},
${toldCte(s, 'SELECT id, state, queue, watched FROM rescued', '$2')},
${notifyCte("SELECT queue, run_at FROM rescued WHERE state = 'pending'", '$2')}
SELECT count(*)::int AS rescued,
       count(*) FILTER (WHERE state = 'dead')::int AS dead,
       (SELECT count(*) FROM notified)::int AS notified, (SELECT count(*) FROM debts)::int AS debts,
       (SELECT count(*) FROM told)::int AS told${extra ? `,
       ${extra}` : ''}
FROM rescued`;
}

/**
 * Housekeeping that any instance may run at any time; SKIP LOCKED keeps instances (and live
 * transactional handlers, which hold their rows locked) out of each other's way.
 */
export function maintainStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    /**
     * Hung-task recovery: running tasks whose lease ran out go back to pending, or to dead when the
     * lost attempt was the last one (a task that kills its worker every time cannot loop forever),
     * or to cancelled when that was asked for. A transactional handler still inside its transaction
     * holds the row lock and is skipped.
     * It also says, for the same rescuer pass, whether the dependency settler has anything to do
     * (debts of either kind, workflows waiting for a child: see DependencyRepository.settle), so an
     * idle instance's pass sends no settle statements (one-time probes, the child one by
     * workflow_step_child_waiting_idx). Debts this statement writes are not in its snapshot: see
     * its `debts` count.
     * Parameters: $1 batch limit, $2 channel.
     */
    rescueExpired: rescueFrom(s, {
      candidates: `
  SELECT t.id
  FROM ${s}.task t
  WHERE t.state = 'running' AND t.locked_until < now()
  ORDER BY t.locked_until
  LIMIT $1
  FOR UPDATE OF t SKIP LOCKED`,
      lastError: "'lease expired: worker ' || coalesce(t.locked_by, '?') || ' did not finish attempt ' || t.attempt",
      extra: `EXISTS (SELECT 1 FROM ${s}.task_dependency_debt) AS fan_in_owed,
       EXISTS (SELECT 1 FROM ${s}.workflow_child_debt) AS children_owed,
       EXISTS (SELECT 1 FROM ${s}.workflow_step j WHERE j.kind = 'child' AND j.outcome = 'waiting') AS children_waiting`,
    }),

    /**
     * Ends the statement running on a transactional batch's backend: a handler stuck in a query
     * past its timeout would otherwise keep its slot, its connection and its row locks, and the
     * rollback would wait behind the query. Only while that backend still runs the batch's own
     * transaction: by the time this statement gets a pool connection, the batch may have ended
     * (Prisma's transaction timeout) and its backend serve someone else.
     * Parameters: $1 backend pid, $2 the batch transaction's xid.
     */
    cancelStatement: `
SELECT pg_cancel_backend(pid) AS cancelled FROM pg_stat_activity
WHERE pid = $1::int AND backend_xid = $2::xid`,

    /**
     * Retention of the archive's partitions (archive_partition_step, runtime-functions.ts): one
     * change per call, dropping a partition wholly older than $3 ms or creating the next of width
     * $1 ms while fewer than $2 widths lie ahead; `action` is NULL when nothing is left to do,
     * `busy` when the DDL gave up waiting for its locks. One instance at a time: the function takes the pruner's
     * advisory lock first (`ran` false: another instance holds it). Each call is its own
     * transaction, so a DDL's ACCESS EXCLUSIVE lock lasts a catalog change, not a round. Not DETACH
     * PARTITION CONCURRENTLY: it cannot run in a transaction, so neither under this
     * transaction-scoped lock nor through a transaction-pooling PgBouncer (a session lock would be
     * held by whichever client got the connection), and a detach it left half done would need
     * FINALIZE. `rowsEstimate`: a dropped partition's rows as the planner estimates them (NULL:
     * never analyzed), not counted. Parameters: $1 width ms, $2 periods ahead, $3 archive age ms,
     * $4 schema name (lock key).
     */
    archivePartitionStep: `
SELECT ran, action, partition_name AS "partition", tasks::float8 AS "rowsEstimate"
FROM ${s}.archive_partition_step(${PRUNE_LOCK_NAMESPACE}, $4, $1::bigint, $2::int, $3::bigint, ${PARTITION_DDL_LOCK_TIMEOUT_MS})`,

    /**
     * Retention, one instance at a time (a transaction-scoped advisory lock; the others skip the
     * round): delete rows of the archive's default partition older than $1 ms (the range
     * partitions go whole, see archivePartitionStep) and dead or cancelled tasks in the hot table
     * older than $2 ms, at most $3 rows each, oldest first, and what flow control keeps once it
     * went quiet (a missing row means just that): debounce keys whose burst ended, per-partition
     * rate windows whose claims have all left them (rate_window; partition_rate: those of
     * instances older than migration 15), and the journals and signals of workflows gone from the
     * hot table for longer than $1 ms. Run repeatedly until nothing is left.
     * Parameters: $1 archive age ms, $2 dead age ms, $3 batch limit, $4 schema name (lock key).
     */
    prune: `
WITH lock AS (
  SELECT pg_try_advisory_xact_lock(${PRUNE_LOCK_NAMESPACE}, hashtext($4)) AS mine
), archived AS (
  DELETE FROM ${s}.task_archive_default
  WHERE id = ANY (ARRAY (
    SELECT id FROM ${s}.task_archive_default
    WHERE finished_at < now() - $1 * interval '1 millisecond' AND (SELECT mine FROM lock)
    ORDER BY finished_at LIMIT $3
  ))
  RETURNING 1
), dead AS (
  DELETE FROM ${s}.task
  WHERE id = ANY (ARRAY (
    SELECT id FROM ${s}.task
    WHERE state IN ('dead', 'cancelled') AND finished_at < now() - $2 * interval '1 millisecond'
      AND (SELECT mine FROM lock)
    ORDER BY finished_at LIMIT $3
    FOR UPDATE SKIP LOCKED
  ))
  RETURNING 1
), quiet_keys AS (
  DELETE FROM ${s}.task_debounce
  WHERE (queue, key) IN (SELECT queue, key FROM ${s}.task_debounce
                         WHERE quiet_until < now() AND (SELECT mine FROM lock) LIMIT $3 FOR UPDATE SKIP LOCKED)
  RETURNING 1
), quiet_windows AS (
  DELETE FROM ${s}.partition_rate
  WHERE (queue, partition_key) IN (
    SELECT queue, partition_key FROM ${s}.partition_rate
    WHERE starts[cardinality(starts)] < now() - window_ms * interval '1 millisecond' AND (SELECT mine FROM lock)
    LIMIT $3 FOR UPDATE SKIP LOCKED)
  RETURNING 1
), quiet_rates AS (
  -- rate_at is ascending: its last entry is the window's latest claim.
  DELETE FROM ${s}.rate_window
  WHERE (queue, partition_key) IN (
    SELECT queue, partition_key FROM ${s}.rate_window
    WHERE coalesce(rate_at[cardinality(rate_at)] < now() - window_ms * interval '1 millisecond', true) AND (SELECT mine FROM lock)
    LIMIT $3 FOR UPDATE SKIP LOCKED)
  RETURNING 1
), ended_workflows AS (
  -- Journals of workflows that left the hot table longer ago than the archive keeps tasks (their
  -- archive rows go at about the same time); a parked workflow is live, so its journal stays.
  SELECT DISTINCT w.task_id FROM ${s}.workflow_step w
  WHERE w.finished_at < now() - $1 * interval '1 millisecond' AND (SELECT mine FROM lock)
    AND NOT EXISTS (SELECT 1 FROM ${s}.task t WHERE t.id = w.task_id)
  LIMIT $3
), old_journals AS (
  DELETE FROM ${s}.workflow_step w USING ended_workflows e WHERE w.task_id = e.task_id
  RETURNING 1
), old_signals AS (
  -- Signals of finished tasks: consumed, or never waited for.
  DELETE FROM ${s}.workflow_signal
  WHERE id = ANY (ARRAY (
    SELECT g.id FROM ${s}.workflow_signal g
    WHERE g.created_at < now() - $1 * interval '1 millisecond' AND (SELECT mine FROM lock)
      AND NOT EXISTS (SELECT 1 FROM ${s}.task t WHERE t.id = g.task_id)
    ORDER BY g.id LIMIT $3))
  RETURNING 1
), quiet AS (
  SELECT 1 FROM quiet_keys UNION ALL SELECT 1 FROM quiet_windows UNION ALL SELECT 1 FROM quiet_rates
  UNION ALL SELECT 1 FROM old_journals UNION ALL SELECT 1 FROM old_signals
)
SELECT (SELECT mine FROM lock) AS ran, (SELECT count(*) FROM archived)::int AS archived,
       (SELECT count(*) FROM dead)::int AS dead, (SELECT count(*) FROM quiet)::int AS quiet`,
  });
}
