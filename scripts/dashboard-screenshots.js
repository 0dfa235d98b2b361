// `npm run screenshots` (after `nest build`): the example app on a throwaway local PostgreSQL with
// live demo traffic, and PNGs of its queue dashboard in docs/ (overview, task list, task detail,
// schedules), taken by headless Chromium (Debian's `chromium`, or CHROMIUM_PATH).
// Traffic runs for SCREENSHOT_MINUTES minutes (default 3), a wave of orders every 20 s with a
// gateway failure rate that varies, so the per-minute chart has a few minutes of bars; a few
// confirmations of orders that do not exist end dead.
const fs = require('node:fs');
const path = require('node:path');
const { startLocalPostgres } = require('./local-postgres');
const { migrate } = require('./migrate');

const ROOT = path.join(__dirname, '..');
const OUT = path.join(ROOT, 'docs');
const MINUTES = Number(process.env.SCREENSHOT_MINUTES ?? 3);

function chromiumPath() {
  const candidates = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].filter(Boolean);
  const found = candidates.find((p) => fs.existsSync(p));
  if (!found) throw new Error(`no Chromium found (${candidates.join(', ')}): apt-get install -y chromium, or set CHROMIUM_PATH`);
  return found;
}

async function main() {
  const executablePath = chromiumPath();
  const pg = await startLocalPostgres({ label: 'screens', settings: { fsync: 'off', synchronous_commit: 'off' } });
  process.on('exit', () => pg.stop());
  process.env.DATABASE_URL = pg.url;
  process.env.DASHBOARD_TOKEN ||= 'screenshots';
  await migrate(pg.url);
  const { NestFactory } = require('@nestjs/core');
  const { AppModule } = require(path.join(ROOT, 'dist/src/app.module.js'));
  const { PaymentGateway } = require(path.join(ROOT, 'dist/src/payments/payment-gateway.js'));
  const { TaskQueue } = require(path.join(ROOT, 'dist/libs/pg-queue/src/index.js'));
  const app = await NestFactory.create(AppModule, { logger: ['warn', 'error'] });
  await app.listen(0, '127.0.0.1');
  const base = await app.getUrl();
  const gateway = app.get(PaymentGateway);
  const queue = app.get(TaskQueue);
  gateway.latencyMs = [5, 60];

  let customer = 0;
  const postOrders = async (n) => {
    await Promise.all(
      Array.from({ length: 8 }, async (_, w) => {
        for (let i = w; i < n; i += 8) {
          const res = await fetch(`${base}/orders`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ customer: `customer-${customer++ % 41}`, amountCents: 500 + ((i * 37) % 9000) }),
          });
          if (res.status !== 201) throw new Error(`POST /orders: ${res.status}`);
        }
      }),
    );
  };
  const waves = Math.max(1, Math.round((MINUTES * 60) / 20));
  console.log(`dashboard screenshots: ${waves} waves of orders over ${MINUTES} min on ${base}`);
  for (let w = 0; w < waves; w++) {
    gateway.failureRate = [0.05, 0.3, 0.1, 0.5, 0.02, 0.2][w % 6];
    await postOrders(40 + ((w * 23) % 60));
    if (w === Math.floor(waves / 2)) {
      for (let i = 0; i < 4; i++) await queue.enqueue('order.confirm', { orderId: 900_000 + i }); // dead: no such order
    }
    await new Promise((r) => setTimeout(r, 20_000));
  }
  // Work waiting for later, and a backlog that is due now.
  await queue.enqueueMany(Array.from({ length: 25 }, (_, i) => ({ queue: 'reports.export', payload: { report: i }, options: { delayMs: 3_600_000 } })));
  await queue.enqueueMany(Array.from({ length: 12 }, (_, i) => ({ queue: 'reports.export', payload: { report: 100 + i } })));

  const { chromium } = require('playwright-core');
  const browser = await chromium.launch({ executablePath, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'] });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
    await page.goto(`${base}/queues?token=${encodeURIComponent(process.env.DASHBOARD_TOKEN)}`);
    fs.mkdirSync(OUT, { recursive: true });
    const shot = async (url, file, fullPage = true) => {
      await page.goto(`${base}${url}`);
      await page.screenshot({ path: path.join(OUT, file), fullPage });
      console.log(`  docs/${file}  ${url}`);
    };
    await shot('/queues', 'dashboard-overview.png');
    await shot('/queues/tasks?queue=payment.capture', 'dashboard-tasks.png', false);
    const prisma = app.get(require(path.join(ROOT, 'dist/src/prisma/prisma.service.js')).PrismaService);
    const [retried] = await prisma.$queryRawUnsafe(
      "SELECT id::text AS id FROM pgqueue.task_archive WHERE queue = 'payment.capture' AND state = 'done' AND attempt > 1 ORDER BY id DESC LIMIT 1",
    );
    const [any] = await prisma.$queryRawUnsafe("SELECT id::text AS id FROM pgqueue.task_archive WHERE queue = 'payment.capture' ORDER BY id DESC LIMIT 1");
    await shot(`/queues/tasks/${(retried ?? any).id}`, 'dashboard-task.png');
    await shot('/queues/schedules', 'dashboard-schedules.png');
  } finally {
    await browser.close();
    await app.close();
    pg.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
