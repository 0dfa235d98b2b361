import { AGING_LEVELS, limitedClaims } from './claim.sql';
import { LIMITER_LOCK_NAMESPACE, limiterStatements } from './limiter.sql';
import { LIMIT_LOCK_NAMESPACE, limitStatements } from './limits.sql';
import type { RuntimeFunctionDefinition } from './runtime-functions';

/**
 * How soon a claim that a limiter's concurrency cut short claims again: room a limiter frees may
 * come from another queue's ending, which this queue's worker hears nothing of.
 */
export const LIMITER_RECHECK_MS = 250;
/** The most partitions with room one round of a partitioned claim offers (claim.sql.ts). */
const MAX_ROUND = 1000;
/**
 * How soon a partitioned claim that took nothing claims again when it could not look at every
 * partition: its walk reached MAX_WALK, or its round filled with partitions whose due tasks
 * another transaction holds locked (SKIP LOCKED passed over them). The cursor moved past them; the
 * partitions after them may have work that no notification announces. Not at once: a queue whose
 * partitions are all at their limit would claim in a loop.
 */
export const BLOCKED_ROUND_RECHECK_MS = 250;
/** The most partitions one partitioned claim walks; a longer round goes on in the next claim. */
const MAX_WALK = 1000;
/** Per-partition room when a partition has no concurrency limit of its own (rate limit per partition only). */
const UNLIMITED = 1_000_000;

/**
 * `claim_limited(queue, want, worker, lease_ms, max_attempts, claim_id, rules)`: the whole claim of
 * a queue with flow-control rules (limits.sql.ts) in one statement, so one round trip: the
 * queue's lock, its room, a named limiter's lock and budget, the claim, and what it records. The
 * statements of limits.sql.ts and limiter.sql.ts, in their order, each with a fresh snapshot (a
 * VOLATILE plpgsql function's statements take one each under READ COMMITTED), so each one after
 * the lock sees every claim that committed before it was granted. Run as statements of an interactive transaction, the
 * claim would hold the queue's lock over as many round trips, which caps a limited queue's
 * throughput.
 *
 * Bounds. The lock is held while the server runs the statement, which needs nothing from the
 * client until it writes the reply; a claimer waits for it at most `lockWaitMs` (lock_timeout). A
 * reply larger than the socket's buffers blocks the server's write while the lock is held: if the
 * client's network died, tcp_user_timeout (`replyMs`) drops the connection once the reply has gone
 * unacknowledged that long, which rolls the claim back and frees the lock. No statement_timeout can
 * be set for the statement that is running: the claim gives up before it claims (57014, as a
 * statement timeout) once the call has run `statementMs`, and the claim's own work is bounded by its
 * sizes (want, MAX_ROUND, MAX_WALK); so it commits or rolls back inside
 * LIMITED_CLAIM_BOUNDS.transactionMs, the window in which a claimer looks for the rows of a claim
 * whose answer it lost (OwedOutcomes).
 *
 * Under another isolation level nothing is done: `isolation` says which, and the caller runs it
 * again in a READ COMMITTED transaction (read-committed.ts), where idle_in_transaction_session_timeout
 * (`idleMs`) bounds the lock until that transaction's commit.
 *
 * `rules` (JSON; fields absent or null: no such rule), so that the signature never changes:
 * release (the caller's: a body older than its caller refuses the call, as it would not know every
 * rule the caller sends), lockWaitMs, idleMs, replyMs, statementMs, channel (notifyChannel), global
 * (globalConcurrency), rateMax/rateMs (queue-wide rate limit), partition (partitionConcurrency),
 * partitionRateMax/partitionRateMs (rate limit per partition), agingMs (priorityAgingMs), weights
 * (partitionWeights, a JSON object), limiter (its name), limiterConcurrency,
 * limiterRateMax/limiterRateMs, ending (lease tokens of the caller's tasks whose handler has
 * ended and whose ending is not written yet: not counted as running under `global`, nor in their
 * partition under `partition`; an older instance sends none and counts them, and an older body may
 * count them in their partitions: either takes less, never more). The locks are
 * named `${schema}.${queue}` and `${schema}.${limiter}`.
 * Returns the claim's rows (JSON text), when to claim again (ms; NULL: on a wake-up only), the
 * database's clock, whether the queue is paused as a whole, the isolation level, and whether the
 * claim left no room under the global or the limiter's concurrency (`full`).
 */
/** claim_limited's release: every change of its text raises it (runtime-functions.ts). */
export const LIMITED_CLAIM_RELEASE = 7;

export const limitedClaim: RuntimeFunctionDefinition = {
  name: 'claim_limited',
  args: 'text, integer, text, bigint, integer, text, jsonb',
  requires: 24,
  release: LIMITED_CLAIM_RELEASE,
  body: (s, schema) => {
    const lockPrefix = `'${schema}.'`; // a schema name is a lower-case identifier (validateSchemaName)
    const limits = limitStatements(schema);
    const limiter = limiterStatements(schema);
    const claims = limitedClaims(schema);
    // The statements' parameters, by position, as the function's variables.
    const claimArgs = ['p_queue', 'v_take', 'p_worker', 'p_lease_ms', 'p_max_attempts'];
    const claimed = 'v_claimed, v_next_due, v_db_now, v_paused';
    return `
CREATE OR REPLACE FUNCTION ${s}.claim_limited(p_queue text, p_want integer, p_worker text, p_lease_ms bigint, p_max_attempts integer,
  p_claim_id text, p_rules jsonb, OUT claimed text, OUT next_due_in_ms float8, OUT db_now_ms float8, OUT paused boolean, OUT isolation text,
  OUT limit_full boolean)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
  p_global integer := (p_rules->>'global')::integer;
  p_rate_max integer := (p_rules->>'rateMax')::integer;
  p_rate_ms bigint := CASE WHEN p_rules->>'rateMax' IS NOT NULL THEN (p_rules->>'rateMs')::bigint ELSE 0 END;
  p_partition integer := (p_rules->>'partition')::integer;
  p_prate_max integer := (p_rules->>'partitionRateMax')::integer;
  p_prate_ms bigint := CASE WHEN p_rules->>'partitionRateMax' IS NOT NULL THEN (p_rules->>'partitionRateMs')::bigint ELSE 0 END;
  p_aging bigint := (p_rules->>'agingMs')::bigint;
  -- jsonb, not text: under a generic plan a text would be parsed again for every partition walked.
  p_weights jsonb := CASE WHEN jsonb_typeof(p_rules->'weights') = 'object' THEN p_rules->'weights' END;
  p_limiter text := p_rules->>'limiter';
  p_lim_concurrency integer := (p_rules->>'limiterConcurrency')::integer;
  p_lim_rate_max integer := (p_rules->>'limiterRateMax')::integer;
  p_lim_rate_ms bigint := CASE WHEN p_rules->>'limiterRateMax' IS NOT NULL THEN (p_rules->>'limiterRateMs')::bigint ELSE 0 END;
  p_channel text := p_rules->>'channel';
  p_ending uuid[] := ARRAY(SELECT jsonb_array_elements_text(coalesce(p_rules->'ending', '[]'))::uuid);
  v_partitioned boolean := p_partition IS NOT NULL OR p_prate_max IS NOT NULL;
  v_aging_levels integer := ${AGING_LEVELS};
  v_unlimited integer := coalesce(p_partition, ${UNLIMITED});
  v_max_walk integer := ${MAX_WALK};
  -- The room (limits.sql.ts: room).
  v_running integer; v_window_count integer; v_window_frees float8; v_cursor text; v_turns integer;
  v_partition_frees float8; v_room_db_now float8; v_room_wanted boolean; v_due boolean; v_paused_all boolean; v_backed_off float8;
  -- The limiter's budget (limiter.sql.ts: room).
  v_lim_running integer; v_lim_window_count integer; v_lim_window_frees float8;
  v_lim_take integer; v_lim_wait float8;
  -- The claim and what it records.
  v_take integer; v_rate_wait float8; v_round integer; v_turns_left integer;
  v_claimed text := '[]'; v_next_due float8; v_db_now float8; v_paused boolean;
  v_next_cursor text; v_next_turns integer; v_new_cursor text; v_new_turns integer; v_walk_cut boolean := false; v_round_full boolean := false; v_partition_full boolean := false; v_room_left boolean := false;
  v_taken integer := 0; v_cut boolean; v_wanted boolean; v_starts text; v_note text;
BEGIN
  IF coalesce((p_rules->>'release')::integer, 0) > ${LIMITED_CLAIM_RELEASE} THEN
    RAISE EXCEPTION 'pg-queue: this claim_limited is release ${LIMITED_CLAIM_RELEASE}, older than its caller''s (%): run pg-queue schema install',
      p_rules->>'release' USING ERRCODE = '42883';
  END IF;
  IF p_rules->>'lockWaitMs' IS NULL OR p_rules->>'idleMs' IS NULL OR p_rules->>'replyMs' IS NULL OR p_rules->>'statementMs' IS NULL OR p_channel IS NULL THEN
    RAISE EXCEPTION 'pg-queue: claim_limited needs lockWaitMs, idleMs, replyMs, statementMs and channel in its rules: %', p_rules USING ERRCODE = '22023';
  END IF;
  isolation := current_setting('transaction_isolation');
  IF isolation <> 'read committed' THEN RETURN; END IF;
  -- Bounds and planning for this transaction (set_config(..., true)): see \`claim\` in limits.sql.ts.
  PERFORM set_config('lock_timeout', (p_rules->>'lockWaitMs') || 'ms', true),
          set_config('idle_in_transaction_session_timeout', (p_rules->>'idleMs') || 'ms', true),
          set_config('tcp_user_timeout', p_rules->>'replyMs', true),
          set_config('jit', 'off', true),
          set_config('plan_cache_mode', 'force_generic_plan', true);
  PERFORM pg_advisory_xact_lock(${LIMIT_LOCK_NAMESPACE}, hashtext(${lockPrefix} || p_queue));

  SELECT r.running, r.window_count, r.window_frees_in_ms, r.cursor, r.turns, r.partition_frees_in_ms, r.db_now_ms,
         r.room_wanted, r.due, r.paused, r.backed_off_ms
    INTO v_running, v_window_count, v_window_frees, v_cursor, v_turns, v_partition_frees, v_room_db_now,
         v_room_wanted, v_due, v_paused_all, v_backed_off
    FROM (${bindParams(limits.room, ['p_queue', 'p_rate_ms', 'p_prate_max', 'p_prate_ms', 'p_limiter', 'p_ending'])}) r;
  claimed := '[]';
  db_now_ms := v_room_db_now;
  -- Paused as a whole (pause.sql.ts): nothing to claim, nothing to record; a resume wakes the workers.
  IF v_paused_all THEN paused := true; RETURN; END IF;
  -- Backed off, the queue or its limiter (backoff.sql.ts): nothing to claim until it ends.
  IF v_backed_off IS NOT NULL THEN next_due_in_ms := v_backed_off; RETURN; END IF;

  v_take := p_want;
  -- A limiter's budget, under its lock, taken after the queue's.
  IF p_limiter IS NOT NULL THEN
    PERFORM pg_advisory_xact_lock(${LIMITER_LOCK_NAMESPACE}, hashtext(${lockPrefix} || p_limiter));
    SELECT r.running, r.window_count, r.window_frees_in_ms INTO v_lim_running, v_lim_window_count, v_lim_window_frees
      FROM (${bindParams(limiter.room, ['p_limiter', 'p_lim_rate_ms'])}) r;
    v_lim_take := least(coalesce(p_lim_concurrency - v_lim_running, 2147483647), coalesce(p_lim_rate_max - v_lim_window_count, 2147483647));
    -- When the rate is what binds, wait for its window; for concurrency (room another queue's ending frees), look again soon.
    v_lim_wait := CASE WHEN coalesce(p_lim_rate_max - v_lim_window_count, 2147483647) <= coalesce(p_lim_concurrency - v_lim_running, 2147483647)
                       THEN v_lim_window_frees ELSE ${LIMITER_RECHECK_MS} END;
    v_take := least(v_take, v_lim_take);
  END IF;
  v_take := least(v_take, p_global - v_running);
  -- When the rate is what stops the claim, the worker's timer waits for the window to move.
  IF p_rate_max IS NOT NULL AND p_rate_max - v_window_count < v_take THEN v_rate_wait := v_window_frees; END IF;
  v_take := least(v_take, p_rate_max - v_window_count);

  IF v_take > 0 AND clock_timestamp() - statement_timestamp() > (p_rules->>'statementMs')::bigint * interval '1 millisecond' THEN
    RAISE EXCEPTION 'pg-queue: limited claim of % gave up after % ms, before claiming', p_queue, p_rules->>'statementMs' USING ERRCODE = '57014';
  END IF;
  IF v_take > 0 THEN
    IF NOT v_partitioned AND p_aging IS NULL THEN
      ${bindParams(claims.plain, [...claimArgs, 'p_claim_id'])}
      INTO ${claimed};
    ELSIF NOT v_partitioned THEN
      PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
      ${bindParams(claims.aging, [...claimArgs, 'p_aging', 'v_aging_levels', 'p_claim_id'])}
      INTO ${claimed};
      PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
    ELSE
      -- One partition more than it can take: whether room is left after the claim (room_left).
      -- Each partition walked costs index probes, so a claim of a few tasks walks a few partitions.
      v_round := least(${MAX_ROUND}, v_take + 1);
      v_turns_left := CASE WHEN v_cursor IS NULL THEN 0 ELSE v_turns END;
      ${bindParams(claims.partitioned, [
        ...claimArgs, 'v_unlimited', 'v_cursor', 'v_round', 'p_prate_max', 'p_prate_ms', 'v_max_walk', 'v_turns_left', 'p_weights', 'p_claim_id', 'p_ending',
      ])}
      INTO ${claimed}, v_next_cursor, v_next_turns, v_walk_cut, v_round_full, v_partition_full, v_room_left;
    END IF;
    v_taken := json_array_length(v_claimed::json);
    db_now_ms := v_db_now;
  END IF;

  -- What the claim records about room (room_wanted, see record in limits.sql.ts): true when a
  -- concurrency rule cut it short while tasks were due (unless a claim already said so); false
  -- when one had, and this claim took all it wanted and left room (the room is announced).
  v_cut := coalesce(p_global - v_running < p_want, false) OR (v_partitioned AND v_taken < v_take AND v_partition_full);
  IF v_cut AND v_due THEN
    v_wanted := CASE WHEN v_room_wanted THEN NULL ELSE true END;
  ELSIF v_room_wanted AND v_taken = p_want AND coalesce(p_global - v_running - v_taken > 0, true) AND (NOT v_partitioned OR v_room_left) THEN
    v_wanted := false;
  END IF;
  -- The round's cursor moves past every partition the claim walked, served or not.
  v_new_cursor := v_cursor;
  v_new_turns := v_turns;
  IF v_take > 0 THEN
    v_new_cursor := CASE WHEN v_partitioned THEN v_next_cursor END;
    v_new_turns := CASE WHEN v_partitioned THEN coalesce(v_next_turns, 0) ELSE 0 END;
  END IF;
  IF (v_taken > 0 AND p_rate_max IS NOT NULL) OR v_wanted IS NOT NULL
     OR (v_partitioned AND v_take > 0 AND (v_taken > 0 OR v_new_cursor IS DISTINCT FROM v_cursor OR v_new_turns <> v_turns)) THEN
    ${bindParams(limits.record, ['p_queue', 'p_rate_ms', 'v_new_cursor', 'v_taken', 'v_wanted', 'p_channel', 'v_new_turns'])}
    INTO v_note;
  END IF;
  IF v_taken > 0 AND p_prate_max IS NOT NULL THEN
    SELECT json_agg(json_build_object('p', x.p, 'n', x.n))::text INTO v_starts
    FROM (SELECT coalesce(e->>'partition_key', '') AS p, count(*)::integer AS n FROM json_array_elements(v_claimed::json) e GROUP BY 1) x;
    ${bindParams(limits.recordPartitions, ['p_queue', 'p_prate_ms', 'v_starts'])};
  END IF;
  IF v_taken > 0 AND p_lim_rate_max IS NOT NULL THEN
    ${bindParams(limiter.record, ['p_limiter', 'p_lim_rate_ms', 'v_taken'])};
  END IF;

  claimed := v_claimed;
  -- No room left under a rule that counts every running task of the queue (see RefillPolicy.slotFreed).
  limit_full := coalesce(p_global - v_running - v_taken <= 0, false) OR coalesce(p_lim_concurrency - v_lim_running - v_taken <= 0, false);
  -- When to claim again: the next due task, the rate window, a full partition's window, a walk cut
  -- short by MAX_WALK or a full round that took less than it had room for (at once when it took
  -- some, else after BLOCKED_ROUND_RECHECK_MS), and the limiter, only when it is what cut the claim
  -- (an idle queue must not poll).
  next_due_in_ms := least(
    v_next_due, v_rate_wait,
    CASE WHEN p_prate_max IS NOT NULL AND v_taken < v_take THEN v_partition_frees END,
    CASE WHEN v_taken < v_take AND (v_walk_cut OR v_round_full) THEN CASE WHEN v_taken > 0 THEN 0 ELSE ${BLOCKED_ROUND_RECHECK_MS} END END,
    CASE WHEN p_limiter IS NOT NULL AND v_lim_take < p_want AND v_taken >= v_lim_take THEN v_lim_wait END);
END $fn$`;
  },
};

/**
 * A statement's positional parameters ($1, $2, ...) as the named variables of a plpgsql body:
 * `names[0]` for $1, and so on. Every parameter the statement uses must have a name.
 */
export function bindParams(sql: string, names: readonly string[]): string {
  return sql.replace(/\$(\d+)(?!\d)/g, (_, n: string) => {
    const name = names[Number(n) - 1];
    if (name === undefined) throw new Error(`bindParams: $${n} has no name`);
    return name;
  });
}
