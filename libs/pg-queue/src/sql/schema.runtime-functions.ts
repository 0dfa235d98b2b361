import type { SqlExecutor } from '../types';
import { parseMarker, type RuntimeFunction } from './runtime-functions';
import { splitSqlScript } from './sql-script';

/**
 * Puts the runtime functions (runtime-functions.ts) in place, in the installer's last transaction
 * of a start: under its advisory lock, its lock_timeout and its retries, once the schema is
 * current. A function is (re)created when its comment (the marker: release and hash) records
 * another hash and a release not above this instance's, or when it has no marker (migration 11's
 * text), or when its body is no longer the one its marker names (CREATE OR REPLACE by hand keeps
 * the comment). So a start that finds every function current changes nothing, and an older
 * instance starting after a newer one keeps the newer body. Functions whose schema version is not
 * applied here (another set of migrations) are left out. Resolves with the names it replaced.
 */
export async function syncRuntimeFunctions(
  tx: SqlExecutor,
  functions: readonly RuntimeFunction[],
  applied: (version: number) => boolean,
  logger: { log(message: string): void },
): Promise<string[]> {
  const wanted = functions.filter((f) => applied(f.requires));
  if (wanted.length === 0) return [];
  const rows = await tx.$queryRawUnsafe<{ identity: string; src_md5: string | null; comment: string | null }[]>(
    `SELECT f.identity, md5(p.prosrc) AS src_md5, obj_description(p.oid, 'pg_proc') AS comment
     FROM unnest($1::text[]) AS f(identity) LEFT JOIN pg_proc p ON p.oid = to_regprocedure(f.identity)`,
    wanted.map((f) => f.identity),
  );
  const found = new Map(rows.map((r) => [r.identity, r]));
  const replaced: string[] = [];
  for (const f of wanted) {
    const row = found.get(f.identity);
    let stored = row?.src_md5 ? (parseMarker(row.comment) ?? { release: 0, hash: '' }) : null;
    if (stored?.hash === f.hash) {
      if (row?.src_md5 === f.srcMd5) continue;
      stored = { release: 0, hash: '' }; // edited since: not what its marker says
    }
    if (stored && stored.release > f.release) {
      logger.log(`schema install: runtime function ${f.name} is at release ${stored.release}, newer than this instance's ${f.release}: kept`);
      continue;
    }
    for (const statement of splitSqlScript(`${f.sql};\n${f.marker}`)) await tx.$executeRawUnsafe(statement);
    logger.log(`schema install: runtime function ${f.name} ${stored ? `updated from release ${stored.release} to` : 'created at'} release ${f.release}`);
    replaced.push(f.name);
  }
  return replaced;
}
