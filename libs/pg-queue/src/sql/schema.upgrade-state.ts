import type { SqlExecutor } from '../types';
import { quoteIdent } from './identifiers';

/** Namespace of the installer's advisory lock; the second key is hashtext(schema). */
export const INSTALL_LOCK_NAMESPACE = 0x70_67_71; // "pgq"

/** A migration recorded as unfinished in `schema_version` (see schemaUpgradeState). */
export interface UnfinishedUpgrade {
  version: number;
  name: string;
  stepsDone: number;
  /** When its last step was recorded. */
  since: Date;
  /** Whether an installer holds the schema's install lock now (one working on it). */
  installing: boolean;
}

/**
 * Migrations left unfinished in the database (steps_done not NULL), for the health check: an
 * upgrade that another instance runs now, or one that stopped part-way (a killed process) and
 * waits for the next start. One small read of schema_version and pg_locks.
 */
export async function schemaUpgradeState(prisma: SqlExecutor, schema: string): Promise<UnfinishedUpgrade[]> {
  const rows = await prisma.$queryRawUnsafe<{ version: number; name: string; steps_done: number; applied_at: Date; installing: boolean }[]>(
    `SELECT v.version, v.name, v.steps_done, v.applied_at,
            EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                    AND l.classid = $1::int::oid AND l.objid = hashtext($2)::oid) AS installing
     FROM ${quoteIdent(schema)}.schema_version v WHERE v.steps_done IS NOT NULL ORDER BY v.version`,
    INSTALL_LOCK_NAMESPACE,
    schema,
  );
  return rows.map((r) => ({ version: r.version, name: r.name, stepsDone: r.steps_done, since: r.applied_at, installing: r.installing }));
}
