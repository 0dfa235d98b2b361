import { NestFactory } from '@nestjs/core';
import type { INestApplication } from '@nestjs/common';
import { TaskQueue, WorkerOrchestrator, type TaskEvent } from '@app/pg-queue';
import { PaymentGateway } from '../payments/payment-gateway';
import { PrismaService } from '../prisma/prisma.service';
import { DemoProbe } from './demo-probe';
import { DemoModule } from './demo.module';
import { dashboardToken } from '../dashboard/dashboard-token.guard';

export interface DemoOptions {
  orders: number;
  httpConcurrency: number;
  pings: number;
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];

/**
 * Boots the example app, pushes orders through POST /orders → order.confirm → payment.capture →
 * email.send, measures, checks every order ended exactly once in each table, and shuts down.
 * Returns the process exit code.
 */
export async function runDemo(opts: DemoOptions): Promise<number> {
  const app = await NestFactory.create(DemoModule, { logger: ['warn', 'error'] });
  app.enableShutdownHooks();
  await app.listen(0, '127.0.0.1');
  const base = await app.getUrl();
  const prisma = app.get(PrismaService);
  const queue = app.get(TaskQueue);
  const counts = { completed: 0, failed: 0, dead: 0, leaseLost: 0 };
  queue.events$.subscribe((e: TaskEvent) => {
    if (e.type === 'completed') counts.completed++;
    else if (e.type === 'failed') counts.failed++;
    else if (e.type === 'dead') counts.dead++;
    else if (e.type === 'lease-lost') counts.leaseLost++;
  });
  console.log(`pg-queue demo: ${opts.orders} orders through order.confirm → payment.capture → email.send`);
  console.log(`listening for wake-ups: ${app.get(WorkerOrchestrator).listening ? 'yes (LISTEN/NOTIFY)' : 'no (polling)'}`);
  console.log(`dashboard (while the demo runs): ${base}/queues?token=${dashboardToken()}`);

  // Only this run's orders count: the database may hold earlier runs (the demo is repeatable).
  const firstId = ((await prisma.order.aggregate({ _max: { id: true } }))._max.id ?? 0) + 1;
  const t0 = performance.now();
  const progress = startProgress(prisma, firstId, opts.orders, counts);
  await postOrders(base, opts.orders, opts.httpConcurrency);
  const enqueuedMs = performance.now() - t0;
  const finished = await waitForOrders(prisma, firstId, opts.orders, counts);
  const flowMs = performance.now() - t0;
  progress.stop();

  const wake = await measureWakeups(app, opts.pings);
  const verdict = await verify(prisma, app.get(PaymentGateway), firstId, opts.orders);
  const stats = await queue.stats();
  const t1 = performance.now();
  await app.close();
  const closeMs = performance.now() - t1;

  const rows: [string, string][] = [
    ['orders created (HTTP, outbox)', `${opts.orders} in ${(enqueuedMs / 1000).toFixed(2)} s`],
    ['orders completed', `${finished} in ${(flowMs / 1000).toFixed(2)} s`],
    ['tasks done', String(counts.completed - wake.samples)],
    ['attempts retried (failed, rescheduled)', String(counts.failed)],
    ['tasks dead', String(counts.dead)],
    ['lease lost', String(counts.leaseLost)],
    ['throughput', `${((counts.completed - wake.samples) / (flowMs / 1000)).toFixed(0)} tasks/s (3 tasks per order)`],
    ['wake-up latency (idle worker, enqueue → handler start)', `p50 ${wake.p50.toFixed(2)} ms, p99 ${wake.p99.toFixed(2)} ms, max ${wake.max.toFixed(2)} ms (n=${wake.samples})`],
    ['gateway calls / distinct charges', `${verdict.gatewayCalls} / ${verdict.charges}`],
    ['payments rows / emails rows', `${verdict.payments} / ${verdict.emails}`],
    ['queue state at the end (the whole database)', stats.map((s) => `${s.queue}: ${s.done} done, ${s.pending} pending, ${s.dead} dead`).join('; ')],
    ['shutdown (drain + disconnect)', `${closeMs.toFixed(0)} ms`],
  ];
  console.log('\nsummary');
  for (const [k, v] of rows) console.log(`  ${k.padEnd(56)} ${v}`);
  if (verdict.problems.length > 0) {
    console.log(`\nFAILED checks:\n  ${verdict.problems.join('\n  ')}`);
    return 1;
  }
  console.log('\nall checks passed: every order completed once, charged once, paid once, emailed once');
  return 0;
}

async function postOrders(base: string, total: number, concurrency: number): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < total) {
      const n = next++;
      const res = await fetch(`${base}/orders`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ customer: `customer-${n % 97}`, amountCents: 100 + (n % 5000) }),
      });
      if (res.status !== 201) throw new Error(`POST /orders → ${res.status}: ${await res.text()}`);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

function startProgress(prisma: PrismaService, firstId: number, total: number, counts: { failed: number; dead: number }) {
  const tty = process.stdout.isTTY;
  let last = 0;
  const timer = setInterval(async () => {
    const byStatus = await prisma.order.groupBy({ by: ['status'], where: { id: { gte: firstId } }, _count: true }).catch(() => []);
    const c = Object.fromEntries(byStatus.map((g) => [g.status, g._count]));
    const line = `orders ${Object.values(c).reduce((a, b) => a + b, 0)}/${total} | new ${c.new ?? 0} confirmed ${c.confirmed ?? 0} paid ${c.paid ?? 0} completed ${c.completed ?? 0} | retries ${counts.failed} dead ${counts.dead}`;
    if (tty) process.stdout.write(`\r${line.padEnd(110)}`);
    else if (Date.now() - last > 2000) {
      last = Date.now();
      console.log(line);
    }
  }, 200);
  return {
    stop() {
      clearInterval(timer);
      if (tty) process.stdout.write('\n');
    },
  };
}

async function waitForOrders(prisma: PrismaService, firstId: number, total: number, counts: { dead: number }): Promise<number> {
  const deadline = Date.now() + 10 * 60_000;
  for (;;) {
    const completed = await prisma.order.count({ where: { id: { gte: firstId }, status: 'completed' } });
    if (completed + counts.dead >= total || Date.now() > deadline) return completed;
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function measureWakeups(app: INestApplication, pings: number) {
  const probe = app.get(DemoProbe);
  const queue = app.get(TaskQueue);
  const latencies: number[] = [];
  for (let seq = 0; seq < pings; seq++) {
    const t = performance.now();
    await queue.enqueue('demo.ping', { seq });
    await probe.started(seq);
    latencies.push(probe.startedAt.get(seq)! - t);
    await new Promise((r) => setTimeout(r, 20));
  }
  latencies.sort((a, b) => a - b);
  return { samples: pings, p50: percentile(latencies, 50), p99: percentile(latencies, 99), max: latencies[latencies.length - 1] };
}

async function verify(prisma: PrismaService, gateway: PaymentGateway, firstId: number, total: number) {
  const problems: string[] = [];
  const ours = { gte: firstId };
  const [orders, completed, payments, emails] = await Promise.all([
    prisma.order.count({ where: { id: ours } }),
    prisma.order.count({ where: { id: ours, status: 'completed' } }),
    prisma.payment.count({ where: { orderId: ours } }),
    prisma.email.count({ where: { orderId: ours } }),
  ]);
  if (orders !== total) problems.push(`${orders} orders, expected ${total}`);
  if (completed !== total) problems.push(`${completed} completed orders, expected ${total}`);
  if (payments !== total) problems.push(`${payments} payments, expected ${total}`);
  if (emails !== total) problems.push(`${emails} emails, expected ${total}`);
  if (gateway.distinctCharges !== total) problems.push(`${gateway.distinctCharges} distinct charges, expected ${total}`);
  return { problems, payments, emails, charges: gateway.distinctCharges, gatewayCalls: gateway.calls };
}
