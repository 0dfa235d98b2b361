/**
 * Weighted partitions: the pieces of the partitioned claim (`claimPartitioned` in limits.sql.ts)
 * that give a partition of weight w w turns a round instead of one.
 *
 * A round visits partitions in key order; a partition gets `weight` turns a visit: its first w due
 * tasks rank 1, its next w rank 2, and so on, and a claim takes by rank, then place in the round.
 * So in a claim that takes many tasks, partitions of weights 3 and 1 give 3 and 1 per rank; and
 * claims that take a few tasks each (slots freeing one at a time) go on where the last one
 * stopped: a claim that ends part-way through the turns of its last partition leaves the rest to
 * the next claim (`queue_state.partition_turns`), which visits that partition first. Weights change
 * no bound of the round: a partition still offers at most its room, and the round visits at most
 * $8 partitions with room, the resumed one among them.
 *
 * A partition's weight: the enqueue option `weight` as the latest enqueue that gave one set it
 * (`partition_weight`, read by primary key per visited partition), else the module's
 * `partitionWeights` ($13, a JSON object by partition), else 1.
 */
import { marked } from './fragments.sql';
import { quoteIdent } from './identifiers';

/**
 * The partitions a round visits, in order (p, n = place): the cursor's partition first (n = 0)
 * while it has turns left ($12 > 0), then the walk, without it.
 */
export const resumedThenWalk = `SELECT $7::text AS p, 0 AS n WHERE $12::int > 0 AND $7::text IS NOT NULL
    UNION ALL
    SELECT k.p, k.n FROM walk k WHERE $12::int = 0 OR k.p IS DISTINCT FROM $7::text`;

/**
 * A visited partition `w`'s weight (`g.weight`) and its turns in this visit (`g.turns`): all of
 * them, or for the resumed cursor's partition what the last claim left of them.
 */
export const weighed = (s: string) => `CROSS JOIN LATERAL (
    SELECT v.weight, CASE WHEN w.n = 0 THEN least($12::int, v.weight) ELSE v.weight END AS turns
    FROM (SELECT coalesce((SELECT pw.weight FROM ${s}.partition_weight pw WHERE pw.queue = $1 AND pw.partition_key = w.p),
                          ($13::jsonb ->> w.p)::int, 1) AS weight) v
    OFFSET 0
  ) g`;

/** The rank (turn) of a partition's `n`th offered task, partition `w` having `w.turns` now and `w.weight` a later turn. */
export const turnOf = (n: string, w: string) => `CASE WHEN ${n} <= ${w}.turns THEN 1 ELSE 2 + (${n} - ${w}.turns - 1) / ${w}.weight END`;

/** The offered tasks this claim took. */
export const TAKEN_OFFERS = 'offered o WHERE o.id IN (SELECT c.id::bigint FROM claimed c)';

/**
 * The turns the next cursor's partition keeps for the next claim: when this claim filled its batch,
 * what its last partition (by rank, then place) had in its last rank less what it gave there (its
 * nth task closes its turns + (rank - 1) * weight); else 0 (every partition with room gave all it
 * could: the next round starts after the walk). An int, like queue_state.partition_turns: as a
 * bigint the driver hands it over as a BigInt, which never equals the number it is compared with.
 */
export const nextTurns = `(SELECT CASE WHEN count(*) < $2 THEN 0
               ELSE greatest((array_agg(o.turns + (o.rank - 1) * o.weight - o.n ORDER BY o.rank DESC, o.pos DESC, o.n DESC))[1], 0) END
        FROM ${TAKEN_OFFERS})::int`;

/** First key of the advisory lock a weight's writer takes (see below); the second is hashtext(schema.queue/partition). */
const WEIGHT_LOCK_NAMESPACE = 0x70_67_70; // "pgp"

/**
 * The enqueue option `weight`: one upsert per call, `partition_weight` rows by (queue, partition).
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
