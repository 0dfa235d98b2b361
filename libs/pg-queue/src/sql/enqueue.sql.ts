import { quoteIdent } from './identifiers';

/**
 * Inserting tasks. One statement serves one task or thousands: rows arrive as parallel arrays
 * (unnest), so a bulk enqueue is one round trip. The NOTIFY is sent once per distinct queue and
 * Postgres delivers it only when the surrounding transaction commits, so a worker never wakes for a
 * task it cannot see yet (and never for one that was rolled back).
 *
 * Parameters: $1 queue[], $2 payload jsonb[], $3 priority[], $4 run_at[] (NULL = now + delay),
 * $5 delay_ms[], $6 max_attempts[], $7 parent_id[], $8 notify channel.
 * Ids come back in input order: identity values are drawn in the order unnest yields rows.
 */
export function enqueueStatements(schema: string) {
  const s = quoteIdent(schema);
  return {
    insertMany: `
WITH input AS (
  SELECT * FROM unnest($1::text[], $2::jsonb[], $3::int[], $4::timestamptz[], $5::bigint[], $6::int[], $7::bigint[])
    AS i(queue, payload, priority, run_at, delay_ms, max_attempts, parent_id)
), inserted AS (
  INSERT INTO ${s}.task (queue, payload, priority, run_at, max_attempts, parent_id)
  SELECT queue, payload, priority,
         coalesce(run_at, now() + delay_ms * interval '1 millisecond'),
         max_attempts, parent_id
  FROM input
  RETURNING id, queue
), notified AS (
  SELECT pg_notify($8, queue) FROM (SELECT DISTINCT queue FROM inserted) q
)
SELECT array_agg(id::text ORDER BY id) AS ids, (SELECT count(*) FROM notified)::int AS notified
FROM inserted`,
  };
}
