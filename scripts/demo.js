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
    console.log(`database: throwaway local PostgreSQL on 127.0.0.1:${pg.port} (set DATABASE_URL to use your own)`);
  } else {
    console.log('database: DATABASE_URL');
  }
  const stop = () => pg && pg.stop();
  process.on('exit', stop);
  process.on('SIGINT', () => process.exit(130));
  try {
    await migrate(process.env.DATABASE_URL, { log: (m) => console.log(m) });
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

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
