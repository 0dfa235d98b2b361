import { quoteIdent } from './identifiers';
import { cancelRequestedOf, marked, notifyCte, rowLockBound } from './fragments.sql';

/**
 * The journal of the task whose id is `taskId` (an SQL expression), without results, as a JSON
 * array in call order, or NULL without entries: for `get`, `chain` and the dashboard
 * (inspect.sql.ts). An index probe of workflow_step's primary key.
 */
export function journalJson(schema: string, taskId: string): string {
  return `(SELECT json_agg(json_build_object('seq', w.seq, 'kind', w.kind, 'name', w.name, 'outcome', w.outcome, 'attempt', w.attempt,
                                    'startedAt', w.started_at, 'finishedAt', w.finished_at,
                                    'timedOut', w.kind = 'signal' AND w.result ? 'timedOut') ORDER BY w.seq)
   FROM ${quoteIdent(schema)}.workflow_step w WHERE w.task_id = ${taskId})`;
}

/**
 * CTEs `child_ended` and `woken` for statements that settle a workflow child's end: `due` (a CTE
 * name) has one row per end with columns workflow (the parent), child, outcome ('done', 'dead',
 * 'cancelled') and result. The child's entry in the parent's journal takes the outcome, and the
 * parent goes back to pending if parked, or is marked `woken` if it runs (its next park then does
 * not wait). Both on the parent's row, which its park also updates: whichever commits first, the
 * other sees it. An end whose entry is no longer waiting (told twice) changes nothing.
 */
export function childEndedCtes(s: string, due: string): string {
  return `child_ended AS (
  UPDATE ${s}.workflow_step j
  SET outcome = CASE WHEN d.outcome = 'done' THEN 'ok' ELSE 'error' END,
      result = CASE WHEN d.outcome = 'done' THEN jsonb_build_object('id', d.child::text, 'v', d.result)
                    ELSE jsonb_build_object('id', d.child::text, 'state', d.outcome) END,
      finished_at = now()
  FROM ${due} d
  WHERE j.task_id = d.workflow AND j.kind = 'child' AND j.outcome = 'waiting' AND j.result ->> 'id' = d.child::text
  RETURNING j.task_id
), woken AS (
  UPDATE ${s}.task w
  SET state = CASE WHEN w.state = 'waiting' THEN 'pending' ELSE w.state END,
      run_at = CASE WHEN w.state = 'waiting' THEN now() ELSE w.run_at END,
      wake_at = CASE WHEN w.state = 'waiting' THEN NULL ELSE w.wake_at END,
      waiting_for = CASE WHEN w.state = 'waiting' THEN NULL ELSE w.waiting_for END,
      woken = w.state <> 'waiting'
  WHERE w.id IN (SELECT task_id FROM child_ended) AND (w.state <> 'waiting' OR w.waiting_for IS NOT NULL)
  RETURNING w.queue, w.state, w.run_at
)`;
}

/** A journal result this large (as stored) counts against an attempt's load budget (see journals). */
const LARGE_RESULT_BYTES = 8192;

/** First key of the advisory lock that orders a signal against a workflow parking on it; the second is hashtext(task id). */
export const SIGNAL_LOCK_NAMESPACE = 0x70_67_77; // "pgw"

/** The notification that tells waker loops when the earliest parked workflow wakes: `!wake@<epoch ms>`. */
export const WAKE_NOTICE = '!wake@';

/**
 * Durable workflows (see workflow/). A workflow is a task run in lease mode whose context journals
 * each call in workflow_step (seq: its position; workflow/journal.ts says how a replay finds it). Every journal write is fenced like a completion:
 * it names the attempt's lease token and takes the task row FOR KEY SHARE, so it commits only
 * while that lease is held, and no claim or rescue (FOR UPDATE SKIP LOCKED) takes the task over
 * before it commits (a new attempt then loads a journal that has it). The weakest row lock, as the
 * transactional handler's (claim.sql.ts lockLeases): an UPDATE of other columns does not wait for
 * it and it does not wait for one, so a business transaction that holds the row (it enqueued a
 * task that depends on this workflow) does not stop the workflow's steps. The primary key (task_id, seq) makes a position's first record the only
 * one. A parked workflow is a task in state 'waiting' with waiting_for set, out of every claim
 * index; the waker moves those whose wake_at has come back to pending.
 *
 * Lost wake-ups: a signal and a park on it serialise on an advisory lock per task, which the signal
 * takes only at its sender's commit (the deferred trigger workflow_signal_committed, runtime-functions.ts,
 * wakes a workflow parked on it there): a signal is sent inside the caller's transaction, whose
 * length we do not control, so neither a lock held for it nor a row lock there may stall the
 * workflow's park or heartbeats. A child's end reaches a parked or running parent through a debt
 * (workflow_child_debt, written by the statement that ended it; settleChildren below) that updates the
 * parent's row either way (pending, or `woken`), so the park, which updates the same row, sees it
 * whichever commits first.
 */
export function workflowStatements(schema: string) {
  const s = quoteIdent(schema);
  /** The attempt's row while its lease ($1 id, $2 token) is held; locked against a takeover until commit. */
  const fence = `SELECT t.id, t.attempt FROM ${s}.task t WHERE t.id = $1::bigint AND t.lease_token = $2::uuid FOR KEY SHARE`;
  const signalLock = `pg_advisory_xact_lock(${SIGNAL_LOCK_NAMESPACE}, hashtext($1::text))`;
  /**
   * Whether what parked workflow `t` waits for has come (see park). `t.woken` is read from the row
   * the UPDATE locked (its newest version, after any settle that changed it), the rest from the
   * statement's snapshot, which the signal lock and the settle's update of `woken` make current enough.
   */
  const ready = `(coalesce(t.woken, false)
            OR ($4::timestamptz IS NOT NULL AND $4::timestamptz <= now())
            OR ($5::text IS NOT NULL AND EXISTS (SELECT 1 FROM ${s}.workflow_signal g WHERE g.task_id = t.id AND g.name = $5 AND g.consumed_seq IS NULL))
            OR ($6::int IS NOT NULL AND NOT EXISTS (SELECT 1 FROM ${s}.workflow_step j WHERE j.task_id = t.id AND j.seq = $6 AND j.outcome = 'waiting')))`;
  return marked({
    /**
     * The journals of tasks $1 (ids as comma-separated text, parsed once: see HELD in
     * fragments.sql.ts), by task, in call order; and, as a row of kind 'cancel' at seq -1, a cancel
     * request that waits for the task (a cancel that met its park, see operate.sql.ts cancelLock):
     * the attempt ends cancelled before it runs anything. Small results always come with their
     * entries; large ones (over LARGE_RESULT_BYTES as stored: pg_column_size, which reads no TOAST)
     * up to $2 bytes of them per task, in call order; the rest are `deferred` (result NULL, never
     * detoasted) and read by `result` when a call replays them, so an attempt does not read a long
     * journal's results all at once, and a replay makes a round trip only for a large one.
     */
    journals: `
WITH ids AS (SELECT string_to_array($1, ',')::bigint[] AS ids)
SELECT task_id::text AS task_id, seq, kind, name, outcome, CASE WHEN NOT deferred THEN result END AS result, kept, deferred
FROM (SELECT task_id, seq, kind, name, outcome, result, kept,
             pg_column_size(result) > ${LARGE_RESULT_BYTES}
             AND sum(CASE WHEN pg_column_size(result) > ${LARGE_RESULT_BYTES} THEN pg_column_size(result) ELSE 0 END)
                 OVER (PARTITION BY task_id ORDER BY seq) > $2 AS deferred
      FROM ${s}.workflow_step WHERE task_id = ANY ((SELECT ids FROM ids)::bigint[])) j
UNION ALL
SELECT task_id::text, -1, 'cancel', '', 'ok', NULL, true, false FROM ${s}.task_cancel WHERE task_id = ANY ((SELECT ids FROM ids)::bigint[])
ORDER BY task_id, seq`,

    /**
     * The result of task $1's journal entry $2 (one `journals` deferred), while lease $3 is held (an
     * attempt that lost it may meet a position the next one freed and reused). An entry's result
     * changes only from waiting to its outcome.
     */
    result: `
SELECT w.result FROM ${s}.workflow_step w JOIN ${s}.task t ON t.id = w.task_id AND t.lease_token = $3::uuid
WHERE w.task_id = $1::bigint AND w.seq = $2::int`,

    /**
     * Records call $3 ($4 kind, $5 name, $6 outcome, $7 result JSON), fenced (see above); $8: ms
     * since the call started. No row back: the lease is lost, or the position was taken (only by an
     * attempt that held the lease before this one). Kept (see forgetTentative).
     */
    record: `
INSERT INTO ${s}.workflow_step (task_id, seq, kind, name, outcome, result, attempt, started_at, finished_at)
SELECT f.id, $3, $4, $5, $6, $7::jsonb, f.attempt, clock_timestamp() - $8 * interval '1 millisecond', clock_timestamp() FROM (${fence}) f
ON CONFLICT (task_id, seq) DO NOTHING
RETURNING seq`,

    /**
     * Records many calls of many attempts at once (JournalWriter: the calls that end in the same
     * turn of the event loop), each fenced by its own lease as in `record`: one statement instead
     * of one per call. $1: JSON rows { id, token, seq, kind, name, outcome, result (JSON text or
     * null), since_ms, kept }, in task id order (the row locks are taken in that order). Returns the
     * entries written; an entry absent lost its lease, or its position was taken.
     */
    recordMany: `
INSERT INTO ${s}.workflow_step (task_id, seq, kind, name, outcome, result, attempt, started_at, finished_at, kept)
SELECT f.id, e.seq, e.kind, e.name, e.outcome, e.result::jsonb, f.attempt, clock_timestamp() - e.since_ms * interval '1 millisecond', clock_timestamp(), e.kept
FROM json_to_recordset($1::json) AS e(id bigint, token uuid, seq int, kind text, name text, outcome text, result text, since_ms float8, kept boolean)
CROSS JOIN LATERAL (SELECT t.id, t.attempt FROM ${s}.task t WHERE t.id = e.id AND t.lease_token = e.token FOR KEY SHARE) f
ON CONFLICT (task_id, seq) DO NOTHING
RETURNING task_id::text AS task_id, seq`,

    /** Resolves the 'waiting' entry $3 with outcome $4 and result $5, fenced. */
    resolve: `
UPDATE ${s}.workflow_step w SET outcome = $4, result = $5::jsonb, finished_at = now()
FROM (${fence}) f
WHERE w.task_id = f.id AND w.seq = $3 AND w.outcome = 'waiting'
RETURNING w.seq`,

    /**
     * A signal wait at position $3 for signal $4: takes the oldest signal of that name not consumed
     * yet and records it as the call's outcome in the same statement (exactly once), or, when there
     * is none, records the wait itself ('waiting', with its deadline: now + $5 ms, or none when $5 is
     * NULL) unless a replay recorded it already. Fenced. Returns whether the lease is held, the
     * signal's payload when one was taken, and the wait's deadline and the database's now.
     */
    takeSignal: `
WITH f AS (${fence}
), taken AS (
  UPDATE ${s}.workflow_signal g SET consumed_seq = $3
  WHERE g.id = (SELECT id FROM ${s}.workflow_signal WHERE task_id = $1::bigint AND name = $4 AND consumed_seq IS NULL ORDER BY id LIMIT 1 FOR UPDATE)
    AND EXISTS (SELECT 1 FROM f)
  RETURNING coalesce(g.payload, 'null'::jsonb) AS payload
), recorded AS (
  INSERT INTO ${s}.workflow_step AS w (task_id, seq, kind, name, outcome, result, attempt, started_at)
  SELECT f.id, $3, 'signal', $4, CASE WHEN t.payload IS NULL THEN 'waiting' ELSE 'ok' END,
         CASE WHEN t.payload IS NULL THEN jsonb_build_object('until', now() + $5::bigint * interval '1 millisecond')
              ELSE jsonb_build_object('v', t.payload) END, f.attempt, now()
  FROM f LEFT JOIN taken t ON true
  ON CONFLICT (task_id, seq) DO UPDATE SET outcome = 'ok', result = EXCLUDED.result, finished_at = now()
    WHERE w.outcome = 'waiting' AND EXCLUDED.outcome = 'ok'
  RETURNING w.result
)
SELECT EXISTS (SELECT 1 FROM f) AS held, EXISTS (SELECT 1 FROM taken) AS took, (SELECT payload FROM taken) AS payload,
       coalesce((SELECT result FROM recorded), (SELECT result FROM ${s}.workflow_step WHERE task_id = $1::bigint AND seq = $3)) -> 'until' AS until,
       (extract(epoch FROM now()) * 1000)::float8 AS now_ms`,

    /** Serialises a park on a signal with the signals sent to task $1 (see above); bounded by $2 ms. */
    lockSignals: `
SELECT set_config('lock_timeout', $2, true) AS bound, ${signalLock} IS NULL AS locked`,

    /**
     * Parks the attempt's workflow ($1, $2: the lease): state 'waiting' for $3 ('sleep',
     * 'signal:<name>', 'child:<id>') until $4 (NULL: no time bound), out of the claim index, its
     * attempt not counted. It goes back to pending at once instead when what it waits for has come:
     * its time ($4 passed), a signal of that name ($5), the child's entry resolved ($6: its
     * position), or `woken` (a child ended while it ran). A cancel request leaves the row alone (the
     * caller records the cancellation as for any attempt). Its wait for the row lock is bounded (a
     * business transaction may hold the row, see rowLockBound); the caller tries again. $7 channel;
     * $8: keep the attempt's tentative entries (false when a failure came after it asked to park).
     */
    park: `
WITH parked AS (
  UPDATE ${s}.task t
  SET state = CASE WHEN ${ready} THEN 'pending' ELSE 'waiting' END,
      wake_at = CASE WHEN ${ready} THEN NULL ELSE $4::timestamptz END,
      waiting_for = CASE WHEN ${ready} THEN NULL ELSE $3 END,
      run_at = now(), woken = NULL, attempt = greatest(t.attempt - 1, 0),
      locked_by = NULL, lease_token = NULL, locked_until = NULL
  WHERE t.id = $1::bigint AND t.lease_token = $2::uuid AND NOT ${cancelRequestedOf(s)}${rowLockBound()}
  RETURNING t.id, t.queue, t.state, t.run_at, t.wake_at
), kept AS (
  -- What the attempt decided stands from here on: its tentative entries are kept (see forgetTentative).
  UPDATE ${s}.workflow_step w SET kept = true FROM parked p WHERE w.task_id = p.id AND NOT w.kept AND $8::boolean
  RETURNING 1
), wake AS (
  SELECT pg_notify($7, '${WAKE_NOTICE}' || (extract(epoch FROM wake_at) * 1000)::bigint) FROM parked WHERE state = 'waiting' AND wake_at IS NOT NULL
), ${notifyCte("SELECT queue, run_at FROM parked WHERE state = 'pending'", '$7')}
SELECT state, (SELECT count(*) FROM wake)::int AS wake, (SELECT count(*) FROM notified)::int AS notified,
       (SELECT count(*) FROM kept)::int AS kept FROM parked`,

    /**
     * After a failed attempt: forgets the tentative entries (kept false: failed steps and
     * transactions, and the steps after such a failure in its attempt, see WorkflowRun), of this
     * attempt and of any earlier one that ended without parking (a crash, a timeout, a shutdown), so
     * that the next attempt runs those calls again. A park keeps them: the code went on from them.
     * A transaction's success, an enqueue, a child, a sleep or a consumed signal is never tentative.
     * Fenced.
     */
    forgetTentative: `
DELETE FROM ${s}.workflow_step w
USING (${fence}) f
WHERE w.task_id = f.id AND NOT w.kept`,

    /**
     * Links child $2 to its parent workflow $1: the statement that ends the child leaves the parent
     * a debt (debtsCte in dependencies.sql.ts). workflow_parents, not dependants: migration 28. A
     * list: a child given a key may be a live task another workflow started as its child too.
     */
    linkChild: `
UPDATE ${s}.task SET workflow_parents = coalesce(workflow_parents, '{}') || $1::bigint WHERE id = $2::bigint`,

    /**
     * Settles up to $1 ends of workflow children (workflow_child_debt), oldest first, stopping at
     * $3 bytes of results as stored (at least one): see childEndedCtes. SKIP LOCKED: two settlers
     * never take the same debt. Parameters: $1 limit, $2 channel, $3 budget in bytes.
     */
    settleChildren: `
WITH taken AS (
  SELECT id, coalesce(pg_column_size(result), 0) AS bytes FROM ${s}.workflow_child_debt ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED
), due AS (
  DELETE FROM ${s}.workflow_child_debt
  WHERE id = ANY (ARRAY (SELECT id FROM (SELECT id, sum(bytes) OVER (ORDER BY id) - bytes AS before FROM taken) b WHERE before < $3))
  RETURNING parent AS workflow, child, outcome, result
), ${childEndedCtes(s, 'due')}, ${notifyCte("SELECT queue, run_at FROM woken WHERE state = 'pending'", '$2')}
SELECT (SELECT count(*) FROM taken)::int AS taken, (SELECT count(*) FROM due)::int AS settled,
       (SELECT count(*) FROM notified)::int AS notified`,

    /**
     * Debts for children that ended with none recorded: an instance of a release before migration
     * 28 ended them (it does not read workflow_parents). Each child entry still waiting whose task
     * is dead or cancelled, archived, or gone (finished: 'delete'); up to $1 per run, for a rescuer pass. A child being
     * settled now has a debt or no waiting entry (both change in one statement), so none is
     * recorded twice but by two passes at once, which the settle takes as told twice. Parameters:
     * $1 limit, $2 channel.
     */
    sweepChildEnds: `
WITH ended AS (
  SELECT j.task_id AS workflow, c.id AS child, c.outcome, c.result
  FROM ${s}.workflow_step j
  CROSS JOIN LATERAL (SELECT (j.result ->> 'id')::bigint AS id) c0
  LEFT JOIN ${s}.task t ON t.id = c0.id
  -- The archive is probed only for a child no longer in the task table (t.id IS NULL: a one-time filter).
  LEFT JOIN LATERAL (SELECT a.state, a.result FROM ${s}.task_archive a WHERE t.id IS NULL AND a.id = c0.id LIMIT 1) a ON true
  -- Neither live nor archived: ended under finished: 'delete' (done, no result kept), as debtsOfEnded takes it.
  CROSS JOIN LATERAL (SELECT c0.id, coalesce(t.state, a.state, 'done') AS outcome,
                             CASE WHEN a.state = 'done' THEN a.result END AS result) c
  WHERE j.kind = 'child' AND j.outcome = 'waiting'
    AND (t.id IS NULL OR t.state IN ('dead', 'cancelled'))
    AND NOT EXISTS (SELECT 1 FROM ${s}.workflow_child_debt d WHERE d.child = c.id AND d.parent = j.task_id)
    AND NOT EXISTS (SELECT 1 FROM ${s}.task_dependency_debt d WHERE d.dependant = j.task_id AND d.parent = c.id)
  LIMIT $1
), recorded AS (
  INSERT INTO ${s}.workflow_child_debt (parent, child, outcome, result)
  SELECT workflow, child, outcome, result FROM ended
  RETURNING pg_notify($2, '!settle')
)
SELECT count(*)::int AS recorded FROM recorded`,

    /**
     * Sends signal $2 (payload $3, JSON) to task $1: buffered; a workflow parked on that signal goes
     * back to pending when the caller's transaction commits (workflow_signal_committed). No lock
     * beyond the row's insert. Returns the signal's id, or none with the target's state ('done',
     * 'cancelled' or NULL: unknown) when it cannot take signals.
     */
    send: `
WITH target AS (
  SELECT id FROM ${s}.task WHERE id = $1::bigint AND state IN ('pending', 'running', 'waiting', 'dead')
), sent AS (
  INSERT INTO ${s}.workflow_signal (task_id, name, payload) SELECT id, $2, $3::jsonb FROM target RETURNING id
)
SELECT (SELECT id::text FROM sent) AS id,
       CASE WHEN NOT EXISTS (SELECT 1 FROM sent)
            THEN coalesce((SELECT state FROM ${s}.task WHERE id = $1::bigint), (SELECT state FROM ${s}.task_archive WHERE id = $1::bigint)) END AS state`,

    /**
     * Wakes parked workflows of queues $1 whose wake_at has come, or (the safety net of
     * workflow_signal_committed, which skips a row another transaction holds) whose signal is
     * there, at most $2 of each, and returns the next wake time among those left (epoch ms, or
     * NULL). The second set is read from the signals not consumed yet (workflow_signal_pending_idx):
     * buffered signals are few. $3 channel.
     */
    wakeDue: `
WITH due_time AS (
  SELECT id FROM ${s}.task
  WHERE state = 'waiting' AND wake_at <= now() AND queue = ANY ($1::text[])
  ORDER BY wake_at LIMIT $2 FOR UPDATE SKIP LOCKED
), due_signal AS (
  SELECT t.id FROM ${s}.workflow_signal g JOIN ${s}.task t ON t.id = g.task_id
  WHERE g.consumed_seq IS NULL AND t.state = 'waiting' AND t.waiting_for = 'signal:' || g.name AND t.queue = ANY ($1::text[])
  LIMIT $2 FOR UPDATE OF t SKIP LOCKED
), due AS (
  SELECT id FROM due_time UNION SELECT id FROM due_signal
), woke AS (
  UPDATE ${s}.task t SET state = 'pending', run_at = now(), wake_at = NULL, waiting_for = NULL
  FROM due WHERE t.id = due.id
  RETURNING t.queue, t.run_at
), ${notifyCte('SELECT queue, run_at FROM woke', '$3')}
SELECT (SELECT count(*) FROM woke)::int AS woke, (SELECT count(*) FROM notified)::int AS notified,
       (SELECT (extract(epoch FROM min(wake_at)) * 1000)::float8 FROM ${s}.task
        WHERE state = 'waiting' AND wake_at > now() AND queue = ANY ($1::text[])) AS next_ms`,

    /**
     * Tests (wakeWorkflows): the time bound of every parked workflow of queues $1 comes now, in its
     * journal too (a replay compares the sleep's recorded end with the clock). Returns how many.
     */
    wakeAllNow: `
WITH parked AS (
  UPDATE ${s}.task SET wake_at = now()
  WHERE state = 'waiting' AND wake_at > now() AND queue = ANY ($1::text[])
  RETURNING id
), journal AS (
  UPDATE ${s}.workflow_step w SET result = jsonb_set(w.result, '{until}', to_jsonb(now()))
  FROM parked p
  WHERE w.task_id = p.id AND w.kind IN ('sleep', 'signal') AND w.outcome IN ('ok', 'waiting')
    AND jsonb_typeof(w.result -> 'until') = 'string' AND (w.result ->> 'until')::timestamptz > now()
  RETURNING 1
)
SELECT (SELECT count(*) FROM parked)::int AS parked, (SELECT count(*) FROM journal)::int AS journal`,

  });
}
