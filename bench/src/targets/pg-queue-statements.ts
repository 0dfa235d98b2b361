/**
 * How the bench finds pg-queue's plain claim among pg_stat_statements (a LIKE pattern on the
 * statement text), for the targets that run it (pg-queue, bare-pg). Checked against the library's
 * claim SQL in test/integration/bench-statement-patterns.spec.ts: a pattern that stops matching
 * turns the claim rows into n/a.
 */
export const CLAIM_STATEMENT_PATTERN = '%FOR UPDATE OF t SKIP LOCKED%lpad(to_hex(t.id)%';
