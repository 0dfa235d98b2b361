import type { PrismaClientLike, SqlExecutor } from '../types';
import { quoteIdent } from './identifiers';
import { migrationSteps, schemaBootstrapSql, schemaMigrations, type SchemaMigration } from './schema.sql';
import { splitSqlScript } from './sql-script';

/** Namespace of the installer's advisory lock; the second key is hashtext(schema). */
const INSTALL_LOCK_NAMESPACE = 0x70_67_71; // "pgq"

/**
 * Creates or upgrades the queue schema, one migration step per transaction: each takes the
 * advisory lock, reads `schema_version`, runs the first step not yet recorded and records it
 * (`steps_done` while its migration is unfinished). So any number of instances can start at once
 * (they take turns and each step runs once), an interrupted migration resumes at its next step, and
 * no step holds the locks of the one before. Resolves when the schema is current, with the
 * versions this call completed.
 *
 * `migrations` is for tests; by default the library's own.
 */
export async function installSchema(prisma: PrismaClientLike, schema: string, migrations: SchemaMigration[] = schemaMigrations(schema)): Promise<number[]> {
  const applied: number[] = [];
  for (;;) {
    const step = await prisma.$transaction((tx: SqlExecutor) => applyNextStep(tx, schema, migrations), { maxWait: 30_000, timeout: 60_000 });
    if (!step) return applied;
    if (step.finished) applied.push(step.version);
  }
}

async function applyNextStep(tx: SqlExecutor, schema: string, migrations: SchemaMigration[]): Promise<{ version: number; finished: boolean } | null> {
  const s = quoteIdent(schema);
  await tx.$executeRawUnsafe('SELECT pg_advisory_xact_lock($1, hashtext($2))', INSTALL_LOCK_NAMESPACE, schema);
  await runScript(tx, schemaBootstrapSql(schema));
  const rows = await tx.$queryRawUnsafe<{ version: number; steps_done: number | null }[]>(`SELECT version, steps_done FROM ${s}.schema_version`);
  const progress = new Map(rows.map((r) => [r.version, r.steps_done]));
  const next = migrations.find((m) => progress.get(m.version) !== null);
  if (!next) return null;
  const steps = migrationSteps(next);
  const done = progress.get(next.version) ?? 0;
  if (done < steps.length) await runScript(tx, steps[done]); // else a later release merged steps: just record it
  const finished = done + 1 >= steps.length;
  await tx.$executeRawUnsafe(
    `INSERT INTO ${s}.schema_version (version, name, steps_done) VALUES ($1, $2, $3)
     ON CONFLICT (version) DO UPDATE SET steps_done = EXCLUDED.steps_done, applied_at = now()`,
    next.version,
    next.name,
    finished ? null : done + 1,
  );
  return { version: next.version, finished };
}

/** Statement by statement: a named (prepared) statement may hold only one. */
async function runScript(tx: SqlExecutor, sql: string): Promise<void> {
  for (const statement of splitSqlScript(sql)) await tx.$executeRawUnsafe(statement);
}
