#!/usr/bin/env node
/**
 * Prints the queue's SQL for teams who keep schema changes in `prisma/migrations`:
 *   node print-schema.js [schema] > prisma/migrations/<timestamp>_pgqueue/migration.sql
 * The output records its versions in <schema>.schema_version, so the startup installer finds the
 * schema current and changes nothing (or set `installSchema: false`).
 */
import { printSchemaSql } from '../sql/schema.sql';
import { validateSchemaName } from '../sql/identifiers';

try {
  process.stdout.write(printSchemaSql(validateSchemaName(process.argv[2] ?? 'pgqueue')));
} catch (err) {
  process.stderr.write(`${(err as Error).message}\n`);
  process.exitCode = 2;
}
