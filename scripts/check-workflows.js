// `npm run check:workflows -- [--minutes M] [--seed N] [--path P]`: the generated-program workflow
// checker (test/workflow-checker/) for a budget of M minutes (default 10), or the one case a failure
// printed (--seed with its --path). Against DATABASE_URL, or a throwaway local cluster when unset.
const { spawnSync } = require('node:child_process');
const { parseArgs } = require('node:util');
const { startLocalPostgres } = require('./local-postgres');

async function main() {
  const { values } = parseArgs({ options: { minutes: { type: 'string', default: '10' }, seed: { type: 'string' }, path: { type: 'string' } } });
  for (const [name, value] of Object.entries(values)) {
    if (value !== undefined && name !== 'path' && !/^\d+(\.\d+)?$/.test(value)) throw new Error(`--${name} takes a number, got ${JSON.stringify(value)}`);
  }
  const env = { ...process.env, CHECK_MINUTES: values.minutes };
  if (values.seed !== undefined) env.CHECK_SEED = values.seed;
  if (values.path !== undefined) env.CHECK_PATH = values.path;
  let pg = null;
  if (!env.DATABASE_URL) {
    pg = await startLocalPostgres({ label: 'check', settings: { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off' } });
    env.DATABASE_URL = pg.url;
  }
  const jest = require.resolve('jest/bin/jest');
  const res = spawnSync(process.execPath, [jest, '--testMatch', '<rootDir>/test/workflow-checker/checker.run.ts', '--testPathIgnorePatterns', '/node_modules/'], { stdio: 'inherit', env });
  pg?.stop();
  process.exit(res.status ?? 1);
}

main().catch((err) => {
  console.error(err.message);
  process.exit(2);
});
