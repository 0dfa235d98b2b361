// `npm run demo` (after `nest build`): the example app end to end. With DATABASE_URL unset it starts a
// throwaway local PostgreSQL (removed at exit); either way it applies the app's migrations first.
const path = require('node:path');
const { startLocalPostgres } = require('./local-postgres');
const { migrate } = require('./migrate');

async function main() {
  let pg = null;
  if (!process.env.DATABASE_URL) {
    pg = await startLocalPostgres({ label: 'demo' });
    process.env.DATABASE_URL = pg.url;
    console.log(`database: throwaway local PostgreSQL on 127.0.0.1:${pg.port}, binaries in ${pg.bin} (set DATABASE_URL to use your own)`);
  } else {
    console.log('database: DATABASE_URL');
  }
  const stop = () => pg && pg.stop();
  process.on('exit', stop);
  process.on('SIGINT', () => process.exit(130));
  try {
    try {
      await migrate(process.env.DATABASE_URL, { log: (m) => console.log(m) });
    } catch (err) {
      console.error(cannotUse(process.env.DATABASE_URL, err));
      process.exitCode = 1;
      return;
    }
    const { runDemo } = require(path.join(__dirname, '..', 'dist', 'src', 'demo', 'run-demo.js'));
    const code = await runDemo({
      orders: Number(process.env.DEMO_ORDERS ?? 3000),
      httpConcurrency: Number(process.env.DEMO_HTTP_CONCURRENCY ?? 16),
      pings: Number(process.env.DEMO_PINGS ?? 200),
    });
    process.exitCode = code;
  } finally {
    stop();
  }
}

/** One line for a database the demo cannot use: where it looked (never the password), why, and the URL's form. */
function cannotUse(url, err) {
  const form = 'DATABASE_URL looks like postgresql://USER:PASSWORD@HOST:5432/DATABASE; unset it to run on a throwaway local PostgreSQL';
  let where;
  try {
    const u = new URL(url);
    if (!/^postgres(ql)?:$/.test(u.protocol)) throw new Error('not postgres');
    where = `${u.hostname}:${u.port || 5432}${u.pathname}`;
  } catch {
    return `demo: DATABASE_URL is not a postgresql:// URL. ${form}.`;
  }
  const reasons = { ECONNREFUSED: 'connection refused', ENOTFOUND: 'host not found', ETIMEDOUT: 'timed out', '28P01': 'password authentication failed', '3D000': 'no such database' };
  const reason = reasons[err && err.code] ?? String((err && err.message) || err).split('\n')[0];
  return `demo: cannot use PostgreSQL at ${where} (${reason}). ${form}.`;
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
