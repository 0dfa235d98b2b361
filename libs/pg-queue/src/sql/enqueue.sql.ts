import type { ConflictMode } from '../core/task-row';
import { quoteIdent } from './identifiers';
import { ON_LIVE_KEY, idList, notifyCte, marked } from './fragments.sql';
import { ENQUEUED_COLUMNS, LEAN_NULLS, taskInput } from './task-fields';

/**
 * Inserting tasks. One statement serves one task or thousands: rows arrive as one JSON array
 * (taskInput), or, for plain rows, as columns (insertManyLean), so a bulk enqueue is one round
 * trip. The NOTIFY is sent once per distinct queue and
 * Postgres delivers it only when the surrounding transaction commits, so a worker never wakes for a
 * task it cannot see yet (and never for one that was rolled back). Its payload is the queue name,
 * plus `@<epoch ms>` when the earliest new task is not yet due, so idle workers can set a timer.
 *
 * Parameters (all statements but insertManyLean): $1 the rows (JSON, see taskInput in
 * task-fields.ts), $2 notify channel.
 */
export type { ConflictMode } from '../core/task-row';

const NOTIFY = `, ${notifyCte('SELECT queue, run_at FROM inserted', '$2')}`;

/** On a live duplicate key: keep the existing task (ignore), update it if pending (replace), or
 * also schedule one more run after the current one if it is running (rerun). */
const ON_CONFLICT: Record<ConflictMode, string> = {
  ignore: 'DO NOTHING',
  replace: `DO UPDATE SET payload = EXCLUDED.payload, priority = EXCLUDED.priority,
                          run_at = EXCLUDED.run_at, max_attempts = EXCLUDED.max_attempts, tags = EXCLUDED.tags
            WHERE task.state = 'pending'`,
  rerun: `DO UPDATE SET
      payload      = CASE WHEN task.state = 'pending' THEN EXCLUDED.payload ELSE task.payload END,
      priority     = CASE WHEN task.state = 'pending' THEN EXCLUDED.priority ELSE task.priority END,
      run_at       = CASE WHEN task.state = 'pending' THEN EXCLUDED.run_at ELSE task.run_at END,
      max_attempts = CASE WHEN task.state = 'pending' THEN EXCLUDED.max_attempts ELSE task.max_attempts END,
      tags         = CASE WHEN task.state = 'pending' THEN EXCLUDED.tags ELSE task.tags END,
      rerun_payload = CASE WHEN task.state = 'running' THEN EXCLUDED.payload END`,
};

export function enqueueStatements(schema: string) {
  const s = quoteIdent(schema);
  const keyed = (mode: ConflictMode) => `
WITH input AS (${taskInput(1)}
), inserted AS (
  INSERT INTO ${s}.task AS task (${ENQUEUED_COLUMNS})
  SELECT ${ENQUEUED_COLUMNS} FROM input ORDER BY ord
  ${ON_LIVE_KEY} ${ON_CONFLICT[mode]}
  RETURNING id, queue, dedup_key, run_at, (xmax = 0) AS created
)${NOTIFY}
-- A row whose conflicting task committed after this statement's snapshot gets a NULL id: retried.
SELECT coalesce(ins.id, live.id)::text AS id, coalesce(ins.created, false) AS created,
       (SELECT count(*) FROM notified)::int AS notified
FROM input i
LEFT JOIN inserted ins ON ins.queue = i.queue AND ins.dedup_key = i.dedup_key
LEFT JOIN ${s}.task live ON ins.id IS NULL AND live.queue = i.queue AND live.dedup_key = i.dedup_key
                        AND live.state IN ('pending', 'running')
ORDER BY i.ord`;
  return marked({
    /** Tasks without dedup keys. Ids come back in input order (identity drawn in input order). */
    insertMany: `
WITH input AS (${taskInput(1)}
), inserted AS (
  INSERT INTO ${s}.task (${ENQUEUED_COLUMNS})
  SELECT ${ENQUEUED_COLUMNS} FROM input ORDER BY ord
  RETURNING id, queue, run_at
)${NOTIFY}
SELECT ${idList('id', 'id')} AS ids, (SELECT count(*) FROM notified)::int AS notified FROM inserted`,
    /**
     * insertMany for plain rows (leanTaskColumns): $1 queues, $3 priorities, $4 delays in ms, $5
     * due times (ISO; '' none), $6 attempt limits ('' none), each comma-separated text; $2 the
     * payloads, one JSON array; $7 the trace context of every row (NULL none); $8 notify channel.
     * unnest pads a shorter list with NULLs ('' splits into no element), which nullif makes of ''.
     * The array is read as json, each payload made jsonb alone: one jsonb array holds 256 MB at
     * most, and a call may carry more.
     */
    insertManyLean: `
WITH input AS (
  SELECT i.queue, e.payload::jsonb AS payload, i.priority::int AS priority, nullif(i.max_attempts, '')::int AS max_attempts,
         $7::jsonb AS trace_context, ${LEAN_NULLS}, i.ord,
         coalesce(nullif(i.run_at_in, '')::timestamptz, now() + i.delay_ms::bigint * interval '1 millisecond') AS run_at
  FROM unnest(string_to_array($1, ','), string_to_array($3, ','), string_to_array($4, ','), string_to_array($5, ','), string_to_array($6, ','))
         WITH ORDINALITY AS i(queue, priority, delay_ms, run_at_in, max_attempts, ord)
  JOIN json_array_elements($2::json) WITH ORDINALITY AS e(payload, ord) USING (ord)
), inserted AS (
  INSERT INTO ${s}.task (${ENQUEUED_COLUMNS})
  SELECT ${ENQUEUED_COLUMNS} FROM input ORDER BY ord
  RETURNING id, queue, run_at
), ${notifyCte('SELECT queue, run_at FROM inserted', '$8')}
SELECT ${idList('id', 'id')} AS ids, (SELECT count(*) FROM notified)::int AS notified FROM inserted`,
    keyed: { ignore: keyed('ignore'), replace: keyed('replace'), rerun: keyed('rerun') } satisfies Record<ConflictMode, string>,
  });
}

/** First key of the advisory lock a weight's writer takes (see below); the second is hashtext(schema.queue/partition). */
const WEIGHT_LOCK_NAMESPACE = 0x70_67_70; // "pgp"

/**
 * The enqueue option `weight` (a partition's turns in the partitioned claim, claim.sql.ts): one
 * upsert per call, `partition_weight` rows by (queue, partition).
 * A row that already holds the weight is left alone (no row lock, no write). An enqueue never waits
 * for another transaction writing the same row (a business transaction that enqueued with a new
 * weight holds it until it ends; two such transactions could deadlock): each row is written only
 * by the transaction that gets its advisory lock without waiting (pg_try_advisory_xact_lock),
 * the others skip it. Of concurrent writers one wins, the others' weights are dropped: a weight is
 * a standing setting per partition, and the next enqueue that carries it writes it again.
 * $2: a lock_timeout for this transaction (text), when the caller's enqueue opened it; NULL in a
 * transaction of the caller's, whose limits are its own (set_config to the current value changes
 * nothing): it bounds only a writer that does not take the advisory lock (an operator's UPDATE).
 * Parameters: $1 JSON [{ queue, p, w }] (one per queue and partition), $2 lock timeout ms or NULL.
 */
export function weightStatements(schema: string) {
  const s = quoteIdent(schema);
  return marked({
    set: `
WITH bounds AS MATERIALIZED (SELECT set_config('lock_timeout', coalesce($2, current_setting('lock_timeout')), true) AS lt),
changed AS MATERIALIZED (
  SELECT x.queue, x.p, x.w FROM bounds, json_to_recordset($1::json) AS x(queue text, p text, w int)
  WHERE NOT EXISTS (SELECT 1 FROM ${s}.partition_weight o WHERE o.queue = x.queue AND o.partition_key = x.p AND o.weight = x.w)
  ORDER BY x.queue, x.p
)
INSERT INTO ${s}.partition_weight AS pw (queue, partition_key, weight)
SELECT c.queue, c.p, c.w FROM changed c
WHERE pg_try_advisory_xact_lock(${WEIGHT_LOCK_NAMESPACE}, hashtext('${schema}.' || c.queue || '/' || c.p))
ON CONFLICT (queue, partition_key) DO UPDATE SET weight = EXCLUDED.weight, updated_at = now()`,
  });
}
