#!/usr/bin/env node
/**
 * `pg-queue-schema [schema]`, kept for existing scripts: the same program as `pg-queue schema
 * print --schema <schema>` (its options and --help included).
 *   npx pg-queue-schema pgqueue > prisma/migrations/<timestamp>_pgqueue/migration.sql
 */
import { run } from './program';

const args = process.argv.slice(2);
const [first, ...rest] = args;
const argv = first === undefined || first.startsWith('-') ? ['schema', 'print', ...args] : ['--schema', first, 'schema', 'print', ...rest];
run(argv, (t) => process.stdout.write(t), (t) => process.stderr.write(t)).then((code) => {
  process.exitCode = code;
});
