import type { PrismaClientLike, SqlExecutor } from '../types';
import { quoteIdent } from './identifiers';
import { schemaBootstrapSql, schemaMigrations } from './schema.sql';

/** Namespace of the installer's advisory lock; the second key is hashtext(schema). */
const INSTALL_LOCK_NAMESPACE = 0x70_67_71; // "pgq"

function statements(sql: string): string[] {
  return sql.split(/;\s*(?:\n|$)/).map((s) => s.trim()).filter((s) => s.length > 0 && !/^(--[^\n]*\n?)+$/.test(s));
}

/**
 * Creates or upgrades the queue schema. Runs in one transaction under an advisory lock, so any
 * number of instances can start at once: the first installs, the rest wait and find it done.
 * Returns the versions this call applied.
 */
export async function installSchema(prisma: PrismaClientLike, schema: string): Promise<number[]> {
  const s = quoteIdent(schema);
  return prisma.$transaction(
    async (tx: SqlExecutor) => {
      await tx.$executeRawUnsafe('SELECT pg_advisory_xact_lock($1, hashtext($2))', INSTALL_LOCK_NAMESPACE, schema);
      for (const stmt of statements(schemaBootstrapSql(schema))) await tx.$executeRawUnsafe(stmt);
      const rows = await tx.$queryRawUnsafe<{ version: number }[]>(`SELECT version FROM ${s}.schema_version`);
      const have = new Set(rows.map((r) => r.version));
      const applied: number[] = [];
      for (const m of schemaMigrations(schema)) {
        if (have.has(m.version)) continue;
        for (const stmt of statements(m.sql)) await tx.$executeRawUnsafe(stmt);
        await tx.$executeRawUnsafe(`INSERT INTO ${s}.schema_version (version, name) VALUES ($1, $2)`, m.version, m.name);
        applied.push(m.version);
      }
      return applied;
    },
    { maxWait: 30_000, timeout: 60_000 },
  );
}
