import { quoteIdent } from './identifiers';
import { marked, notifyCte } from './fragments.sql';
import { ENQUEUED_COLUMNS, enqueuedValues, taskInput } from './task-fields';
import { toldCte } from './watch.sql';
import { childEndedCtes } from './workflow.sql';

/** The notification that asks workers to settle dependency debts (see DependencySettler). */
export const SETTLE_NOTICE = '!settle';

/**
 * Fan-in dependencies (the enqueue option `dependsOn`). A dependant waits in state `waiting` with
 * `deps_left` parents still unfinished; each parent's row lists its dependants (`dependants`).
 *
 * Lock decisions:
 * - The dependants' insert appends their ids to every live parent's `dependants` with an UPDATE
 *   (one per call and parent, whatever the number of dependants), so the parent's row lock orders
 *   it against the parent's end: a completion that ends the parent after that update waits for the
 *   enqueuing transaction and then reads the row again, list included; a parent that ended first
 *   is no longer there to update, and the insert learns how it ended in a second statement (a
 *   fresh snapshot sees the archive row).
 * - A statement that ends a parent (complete, fail, rescue, release, cancel) cannot update the
 *   dependants itself: its snapshot predates a dependant whose enqueue it waited for. It records a
 *   debt per dependant instead (task_dependency_debt, in the same statement, so the debt commits
 *   exactly with the parent's end) and notifies `!settle`; settling runs after that commit with a
 *   fresh snapshot. The dependant's counter is decremented by UPDATE, so two parents settling at
 *   once serialise on its row and the last one makes it pending. The rescuer settles whatever a
 *   crash or a missed notification left behind.
 */
export function dependencyStatements(schema: string) {
  const s = quoteIdent(schema);
  /** The settle statement (see `settle` below); `lock`: how it takes debts another statement locked. */
  const settle = (lock: 'SKIP LOCKED' | '') => `
WITH taken AS (
  SELECT id, coalesce(pg_column_size(result), 0) AS bytes FROM ${s}.task_dependency_debt
  WHERE $3::text IS NULL OR id = ANY (string_to_array($3::text, ',')::bigint[])
  ORDER BY id LIMIT $1 FOR UPDATE ${lock}
), due AS (
  DELETE FROM ${s}.task_dependency_debt
  WHERE id = ANY (ARRAY (SELECT id FROM (SELECT id, sum(bytes) OVER (ORDER BY id) - bytes AS before FROM taken) b WHERE before < $4))
  RETURNING dependant, parent, outcome, result
), per AS (
  SELECT dependant, count(*) FILTER (WHERE outcome = 'done')::int AS done,
         min(parent) FILTER (WHERE outcome <> 'done') AS failed_parent,
         min(outcome) FILTER (WHERE outcome <> 'done') AS failed_outcome,
         jsonb_object_agg(parent::text, coalesce(result, 'null')) FILTER (WHERE outcome = 'done') AS results
  FROM due GROUP BY dependant
), settled AS (
  UPDATE ${s}.task w
  SET deps_left = w.deps_left - p.done,
      parent_results = coalesce(w.parent_results, '{}') || coalesce(p.results, '{}'),
      state = CASE WHEN p.failed_parent IS NOT NULL THEN 'cancelled'
                   WHEN w.deps_left - p.done <= 0 THEN 'pending' ELSE 'waiting' END,
      -- Due from now on, not from its enqueue: it queues behind what came meanwhile (claims go by
      -- run_at) and does not read as overdue. A later runAt/delayMs of its own stays.
      run_at = CASE WHEN p.failed_parent IS NULL AND w.deps_left - p.done <= 0 THEN greatest(w.run_at, now()) ELSE w.run_at END,
      last_error = CASE WHEN p.failed_parent IS NOT NULL
                        THEN 'task ' || p.failed_parent || ', which it depends on, ended ' || p.failed_outcome
                        ELSE w.last_error END,
      finished_at = CASE WHEN p.failed_parent IS NOT NULL THEN now() ELSE w.finished_at END
  FROM per p
  WHERE w.id = p.dependant AND w.state = 'waiting' AND w.waiting_for IS NULL
  RETURNING w.id, w.queue, w.state, w.run_at, w.dependants, w.workflow_parents, w.watched
), legacy_child_ends AS (
  -- A child linked before migration 28, by dependants: its end came as a fan-in debt.
  SELECT dependant AS workflow, parent AS child, outcome, result FROM due
), ${childEndedCtes(s, 'legacy_child_ends')}, cascaded AS (
  INSERT INTO ${s}.task_dependency_debt (dependant, parent, outcome)
  SELECT unnest(dependants), id, 'cancelled' FROM settled WHERE state = 'cancelled' AND dependants IS NOT NULL
  RETURNING parent
), cascaded_children AS (
  -- A workflow's child that waited for other tasks: its parent hears it was cancelled.
  INSERT INTO ${s}.workflow_child_debt (parent, child, outcome)
  SELECT unnest(workflow_parents), id, 'cancelled' FROM settled WHERE state = 'cancelled' AND workflow_parents IS NOT NULL
  RETURNING pg_notify($2, '${SETTLE_NOTICE}')
), ${toldCte(s, "SELECT id, state, queue, watched FROM settled WHERE state = 'cancelled'", '$2')},
${notifyCte("SELECT queue, run_at FROM settled WHERE state = 'pending' UNION ALL SELECT queue, run_at FROM woken WHERE state = 'pending'", '$2')}
SELECT (SELECT count(*) FROM taken)::int AS taken, (SELECT count(*) FROM due)::int AS settled,
       (SELECT count(*) FROM cascaded)::int AS cascaded, (SELECT count(*) FROM notified)::int AS notified,
       (SELECT count(*) FROM told)::int AS told, (SELECT count(*) FROM cascaded_children)::int AS cascaded_children`;
  return marked({
    /** Ids among $1 (comma-separated) that are neither live nor archived. */
    missingParents: `
SELECT coalesce(string_agg(w.id::text, ','), '') AS ids
FROM (SELECT DISTINCT unnest(string_to_array($1, ',')::bigint[]) AS id) w
WHERE NOT EXISTS (SELECT 1 FROM ${s}.task t WHERE t.id = w.id)
  AND NOT EXISTS (SELECT 1 FROM ${s}.task_archive a WHERE a.id = w.id)`,

    /**
     * Inserts the dependants of one enqueue call, all at once. Each one's state: `cancelled` if a
     * parent is dead or cancelled (a parent of the same call cancelled for that reason included,
     * transitively), `waiting` while any parent is unfinished (or ended concurrently: `unsettled`,
     * for debtsOfEnded), else `pending`. Done parents found in the archive give their results at
     * once. Each live parent outside the call gets all its new dependants in one UPDATE (its row
     * lock orders the link against its end, see above; the rows are locked in id order first); a
     * parent of the same call is inserted with its dependants listed. Ids are drawn in input order.
     * Parameters: $1 the rows (JSON, as in enqueue.sql.ts), in dependency order (a row after the
     * rows of the call it names); $2 channel; $3 links to tasks outside $1, JSON [{c, p}]: row c
     * (1-based position in $1) depends on task p; $4 links within $1, JSON [{c, i}]: row c depends
     * on row i. (Two lists, not one with a NULL column: the planner's guesses stay joins by hash.)
     * Returns the ids in input order and the (dependant, parent) pairs left unsettled, as two
     * parallel comma-separated lists.
     */
    insertDependants: `
WITH RECURSIVE input AS (${taskInput(1)}
), new AS (
  SELECT o.ord, nextval(pg_get_serial_sequence('${s}.task', 'id')) AS id FROM (SELECT ord FROM input ORDER BY ord) o
), outer_link AS (
  SELECT DISTINCT e.c AS ord, e.p AS parent FROM json_to_recordset($3::json) AS e(c bigint, p bigint)
), inner_link AS (
  SELECT DISTINCT e.c AS ord, n.id AS parent, e.i AS parent_ord
  FROM json_to_recordset($4::json) AS e(c bigint, i bigint) JOIN new n ON n.ord = e.i
), locked AS (
  -- The live parents' rows, locked in id order before the UPDATE below (which locks in its plan's
  -- order): calls naming shared parents in any order wait for one another, never deadlock.
  SELECT p.id FROM ${s}.task p WHERE p.id = ANY (ARRAY (SELECT parent FROM outer_link)) ORDER BY p.id FOR NO KEY UPDATE
), linked AS (
  UPDATE ${s}.task p SET dependants = coalesce(p.dependants, '{}') || k.children
  FROM (SELECT o.parent, array_agg(n.id ORDER BY n.id) AS children FROM outer_link o JOIN new n ON n.ord = o.ord GROUP BY o.parent) k
  WHERE p.id = k.parent AND p.id = ANY (ARRAY (SELECT id FROM locked)) -- by primary key, whatever the guesses
  RETURNING p.id, p.state
), archived AS (
  SELECT a.id, a.state, a.result FROM ${s}.task_archive a WHERE a.id = ANY (ARRAY (SELECT parent FROM outer_link))
), parent_stand AS (
  -- How each named task outside the call stands, once per task (NOT IN a hashed subplan).
  SELECT id AS parent, NULL::jsonb AS result,
         CASE WHEN state IN ('pending', 'running', 'waiting') THEN 'open' WHEN state IN ('dead', 'cancelled') THEN 'failed' END AS stand
  FROM linked
  UNION ALL
  SELECT w.parent, a.result,
         CASE WHEN a.id IS NULL THEN 'unsettled' WHEN a.state = 'cancelled' THEN 'failed archived' WHEN a.state = 'done' THEN 'done' END
  FROM (SELECT DISTINCT parent FROM outer_link) w LEFT JOIN archived a ON a.id = w.parent
  WHERE w.parent NOT IN (SELECT id FROM linked)
), outside AS (
  SELECT o.ord, o.parent, ps.result, ps.stand FROM outer_link o JOIN parent_stand ps ON ps.parent = o.parent
), doomed (ord) AS (
  SELECT ord FROM outside WHERE stand IN ('failed', 'failed archived')
  UNION
  SELECT l.ord FROM inner_link l JOIN doomed d ON l.parent_ord = d.ord
), stand AS (
  SELECT ord, parent, stand, result FROM outside
  UNION ALL
  SELECT l.ord, l.parent, CASE WHEN l.parent_ord IN (SELECT ord FROM doomed) THEN 'failed' ELSE 'open' END, NULL FROM inner_link l
), verdict AS (
  SELECT n.ord, n.id,
         count(x.parent) FILTER (WHERE x.stand IN ('open', 'unsettled'))::int AS deps_left,
         coalesce(min(x.parent) FILTER (WHERE x.stand = 'failed'), min(x.parent) FILTER (WHERE x.stand = 'failed archived')) AS failed,
         jsonb_object_agg(x.parent::text, coalesce(x.result, 'null')) FILTER (WHERE x.stand = 'done') AS results,
         array_agg(x.parent ORDER BY x.parent) FILTER (WHERE x.parent IS NOT NULL) AS depends_on
  FROM new n LEFT JOIN stand x ON x.ord = n.ord
  GROUP BY n.ord, n.id
), children AS (
  SELECT l.parent_ord AS ord, array_agg(n.id ORDER BY n.id) AS ids FROM inner_link l JOIN new n ON n.ord = l.ord GROUP BY l.parent_ord
), inserted AS (
  INSERT INTO ${s}.task (id, ${ENQUEUED_COLUMNS}, state, depends_on, deps_left, parent_results, last_error, finished_at, dependants)
  OVERRIDING SYSTEM VALUE
  SELECT v.id, ${enqueuedValues('i')},
         CASE WHEN v.failed IS NOT NULL THEN 'cancelled' WHEN v.deps_left > 0 THEN 'waiting' ELSE 'pending' END,
         v.depends_on, v.deps_left, v.results,
         'task ' || v.failed || ', which it depends on, ended dead or cancelled',
         CASE WHEN v.failed IS NOT NULL THEN now() END, c.ids
  FROM input i JOIN verdict v ON v.ord = i.ord LEFT JOIN children c ON c.ord = i.ord
  ORDER BY i.ord
  RETURNING id, queue, state, run_at
), ${notifyCte("SELECT queue, run_at FROM inserted WHERE state = 'pending'", '$2')},
unsettled AS (
  SELECT n.id AS dependant, x.parent FROM stand x JOIN new n ON n.ord = x.ord WHERE x.stand = 'unsettled'
)
SELECT (SELECT string_agg(id::text, ',' ORDER BY ord) FROM new) AS ids,
       (SELECT coalesce(string_agg(dependant::text, ',' ORDER BY dependant, parent), '') FROM unsettled) AS unsettled_dependants,
       (SELECT coalesce(string_agg(parent::text, ',' ORDER BY dependant, parent), '') FROM unsettled) AS unsettled_parents,
       (SELECT count(*) FROM inserted)::int AS inserted, (SELECT count(*) FROM notified)::int AS notified`,

    /**
     * Debts for parents that ended while dependants were being inserted (`unsettled` above), read
     * with a fresh snapshot: cancelled in the archive, or done (archived, or gone without a trace
     * under `finished: 'delete'`). Parameters: $1 dependant ids, $2 parent ids (parallel
     * comma-separated lists: dependant k waits for parent k), $3 channel.
     */
    debtsOfEnded: `
WITH debts AS (
  INSERT INTO ${s}.task_dependency_debt (dependant, parent, outcome, result)
  SELECT w.dependant, w.id, coalesce(a.state, 'done'), a.result
  FROM unnest(string_to_array($1, ',')::bigint[], string_to_array($2, ',')::bigint[]) AS w(dependant, id)
  LEFT JOIN ${s}.task_archive a ON a.id = w.id
  RETURNING pg_notify($3, '${SETTLE_NOTICE}')
)
SELECT count(*)::int AS debts FROM debts`,

    /**
     * Settles up to $1 debts, oldest first: a done parent decrements its dependant's counter and
     * adds its result (the last one makes it pending, due from now on at the earliest); a dead or
     * cancelled one cancels the dependant, whose own dependants get debts
     * in turn (`cascaded`: settle again). SKIP LOCKED: two settlers never take the same debt.
     * `settleWaiting` waits for debts locked instead of passing over them: after a statement failed
     * on its data, whose locks the server holds a while after the error reached us. The
     * debts taken stop at $4 bytes of results as stored (pg_column_size; at least one debt), so
     * one statement reads a bounded amount; `taken` counts the debts locked, `settled` those
     * settled (fewer when the budget cut the batch).
     * Parameters: $1 limit, $2 channel, $3 null, or the only debt ids to take (comma-separated:
     * DependencyRepository's bisection), $4 the budget in bytes.
     */
    settle: settle('SKIP LOCKED'),
    settleWaiting: settle(''),


    /** The ids of up to $1 debts, oldest first, unlocked (what a settle that failed had taken). */
    oldestDebts: `
SELECT coalesce(string_agg(id::text, ','), '') AS ids
FROM (SELECT id FROM ${s}.task_dependency_debt ORDER BY id LIMIT $1) d`,

    /**
     * Quarantines debt $1, which cannot be settled even alone (its result does not fit in its
     * dependant's parent_results: jsonb's size limit): its dependant ends dead with $2 (the
     * database's error) in last_error, never having run, and all its debts go (it waits for
     * nothing now); its own dependants get debts in turn. Its parent_results then lacks that
     * parent, so no retry makes it runnable (see operate.sql.ts). Parameters: $1 debt id, $2
     * error text, $3 channel.
     */
    quarantine: `
WITH fault AS (
  SELECT dependant, parent FROM ${s}.task_dependency_debt WHERE id = $1::bigint
), dropped AS (
  DELETE FROM ${s}.task_dependency_debt d WHERE d.dependant = (SELECT dependant FROM fault)
  RETURNING d.id
), failed AS (
  UPDATE ${s}.task w
  SET state = 'dead', finished_at = now(),
      last_error = 'pg-queue: the results of the tasks it depends on could not be merged (at task '
                   || (SELECT parent FROM fault) || '): ' || $2::text
  WHERE w.id = (SELECT dependant FROM fault) AND w.state = 'waiting'
  RETURNING w.id, w.queue, w.dependants, w.workflow_parents, w.watched
), ${toldCte(s, "SELECT id, 'dead' AS state, queue, watched FROM failed", '$3')}, cascaded AS (
  INSERT INTO ${s}.task_dependency_debt (dependant, parent, outcome)
  SELECT unnest(dependants), id, 'dead' FROM failed WHERE dependants IS NOT NULL
  RETURNING pg_notify($3, '${SETTLE_NOTICE}')
), cascaded_children AS (
  INSERT INTO ${s}.workflow_child_debt (parent, child, outcome)
  SELECT unnest(workflow_parents), id, 'dead' FROM failed WHERE workflow_parents IS NOT NULL
  RETURNING pg_notify($3, '${SETTLE_NOTICE}')
)
SELECT (SELECT count(*) FROM dropped)::int AS settled, (SELECT count(*) FROM cascaded)::int AS cascaded,
       (SELECT count(*) FROM cascaded_children)::int AS cascaded_children,
       (SELECT count(*) FROM told)::int AS told`,

    /** The results of a dependant's parents (done parents only). Parameters: $1 id. */
    parentResults: `SELECT coalesce(parent_results, '{}') AS results FROM ${s}.task WHERE id = $1::bigint`,
  });
}

/**
 * A CTE `debts` for statements that end tasks: one debt per dependant of each row of `source`
 * (columns id, dependants, workflow_parents, outcome, result), one for each parent of a workflow's
 * child (workflow_child_debt, see workflow.sql.ts), and one `!settle` notification ($channel;
 * Postgres folds identical ones). Host statements read count(*) from it, which also makes sure it
 * runs whole. Rows with neither cost a filter.
 */
export function debtsCte(s: string, source: string, channel: string): string {
  // `debts` reads both inserts, so the host's count(*) covers their rows and notifications alike.
  return `ended_parents AS (${source}
), child_debts AS (
  INSERT INTO ${s}.workflow_child_debt (parent, child, outcome, result)
  SELECT unnest(x.workflow_parents), x.id, x.outcome, x.result FROM ended_parents x WHERE x.workflow_parents IS NOT NULL
  RETURNING pg_notify(${channel}, '${SETTLE_NOTICE}')
), fan_in_debts AS (
  INSERT INTO ${s}.task_dependency_debt (dependant, parent, outcome, result)
  SELECT unnest(x.dependants), x.id, x.outcome, x.result FROM ended_parents x WHERE x.dependants IS NOT NULL
  RETURNING pg_notify(${channel}, '${SETTLE_NOTICE}')
), debts AS (
  SELECT 1 FROM fan_in_debts UNION ALL SELECT 1 FROM child_debts
)`;
}
