#!/usr/bin/env node
/** The `pg-queue` command (see program.ts, or `pg-queue --help`). */
import { run } from './program';

run(process.argv.slice(2), (t) => process.stdout.write(t), (t) => process.stderr.write(t)).then((code) => {
  process.exitCode = code;
});
