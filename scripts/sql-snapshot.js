// `npm run sql:snapshot`: writes libs/pg-queue/sql/statements.sql, the text of every statement and
// runtime function (libs/pg-queue/src/sql/statements-snapshot.ts), through the spec that otherwise
// fails when the file is out of date.
const { spawnSync } = require('node:child_process');

const jest = require.resolve('jest/bin/jest');
const res = spawnSync(process.execPath, [jest, 'libs/pg-queue/src/sql/statements-snapshot.spec.ts'], {
  stdio: 'inherit',
  env: { ...process.env, PGQUEUE_WRITE_SQL_SNAPSHOT: '1' },
});
process.exit(res.status ?? 1);
