// `npm test`: a type check, then unit, integration and e2e specs against a real PostgreSQL. With DATABASE_URL unset
// it starts a throwaway local cluster (see local-postgres.js) and removes it afterwards.
// `npm run test:quick` (--quick): the unit and integration specs only (no app processes, no faults).
// Ends with the plain line `tests: N passed, N failed` read from Jest's --json report, and fails
// when no test ran.
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { startLocalPostgres } = require('./local-postgres');

async function main() {
  const env = { ...process.env };
  // Jest compiles with SWC, which strips types without checking them: check them first, the
  // benchmark's project too (it compiles the library's sources the same way, unchecked).
  for (const project of ['tsconfig.json', 'bench/tsconfig.json']) {
    const tsc = spawnSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', project, '--noEmit'], { stdio: 'inherit' });
    if (tsc.status !== 0) {
      console.log(`tests: 0 passed, 1 failed (type check of ${project})`);
      process.exit(1);
    }
  }
  let pg = null;
  if (!env.DATABASE_URL) {
    // Durability settings off: these clusters are thrown away, and tests must not wait on fsync.
    pg = await startLocalPostgres({ label: 'test', settings: { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off', shared_preload_libraries: 'pg_stat_statements' } });
    env.DATABASE_URL = pg.url;
    console.log(`test database: local PostgreSQL on port ${pg.port}`);
  }
  const stop = () => pg && pg.stop();
  process.on('SIGINT', () => { stop(); process.exit(130); });
  process.on('SIGTERM', () => { stop(); process.exit(143); });

  const args = process.argv.slice(2);
  const quick = args.includes('--quick');
  const selection = quick ? ['--testPathPatterns', `^${escapeRegExp(path.resolve(__dirname, '..'))}/(libs|src|test/integration)/`] : [];
  const report = path.join(os.tmpdir(), `pgqueue-jest-${process.pid}.json`);
  const jest = require.resolve('jest/bin/jest');
  // No --forceExit: specs close what they open (test/support/leftovers.ts), so a leak shows up as
  // "Jest did not exit" instead of being cut off (find it with --detectOpenHandles on one spec).
  const res = spawnSync(process.execPath, [jest, '--json', `--outputFile=${report}`, ...selection, ...args.filter((a) => a !== '--quick')], { stdio: 'inherit', env });
  stop();

  let passed = 0;
  let failed = 0;
  let suitesFailed = 0;
  try {
    const r = JSON.parse(fs.readFileSync(report, 'utf8'));
    passed = r.numPassedTests;
    failed = r.numFailedTests;
    suitesFailed = r.numFailedTestSuites;
    fs.rmSync(report, { force: true });
  } catch (err) {
    console.error(`could not read jest's report: ${err.message}`);
  }
  console.log(`tests: ${passed} passed, ${failed} failed`);
  if (res.status !== 0 || failed > 0 || suitesFailed > 0 || passed === 0) process.exit(res.status || 1);
}

function escapeRegExp(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
