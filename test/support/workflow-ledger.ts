type Sql = <T = any>(text: string, values?: unknown[]) => Promise<T[]>;

/**
 * The tables test/fixtures/workflow-worker.ts writes: wf_call, one row per run of an outside call
 * with the key it used (at least once), and wf_ledger, the rows of transaction steps (exactly once).
 */
export async function createWorkflowLedger(sql: Sql): Promise<void> {
  await sql('CREATE TABLE wf_call (workflow text NOT NULL, step text NOT NULL, key text NOT NULL, worker text NOT NULL)');
  await sql('CREATE TABLE wf_ledger (workflow text NOT NULL, step text NOT NULL, worker text NOT NULL)');
}
