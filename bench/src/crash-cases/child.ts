/**
 * One process of the crash-cases demonstration (bench/bullmq-crash-cases.js): the same orders
 * feature written with one library, in one role. argv: <lib: bullmq | pg-queue> <role> <databaseUrl>.
 *
 * Roles (each prints its lines on stdout for the parent, which SIGKILLs it at a crash point):
 * - place-then-crash (case a): places an order as the app does and stops right after the order's
 *   commit: prints "CRASH-POINT <orderId>" and waits there for the parent's SIGKILL. With BullMQ
 *   the `queue.add` comes after that point; with pg-queue the enqueue was inside the transaction.
 * - place-then-roll-back (case b): adds / enqueues the confirmation inside the order's transaction,
 *   which then throws (the payment is declined) and rolls back; prints "ROLLED-BACK <orderId>".
 * - bump-then-crash (case c): adds one counter job and runs a worker whose handler adds 1 to the
 *   counter, prints "CRASH-POINT wrote" and waits there for the parent's SIGKILL.
 * - worker: the instance that survives: runs both handlers until SIGTERM.
 *
 * Every handler run is recorded in crash_demo_run (its own commit) before it does anything, so the
 * parent counts runs from the database. A crash point waits at most 60 s, then the process exits 1.
 */
import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { PrismaPg } from '@prisma/adapter-pg';
import { Queue, Worker, createPostgresBackend, type PostgresPoolConfig } from 'bullmq';
import { PgQueueModule, TaskHandler, TaskQueue, type Task, type TaskContext } from '@app/pg-queue';
import { PrismaClient, type Prisma } from '../../../src/generated/prisma/client';
import { BULLMQ_JOB_OPTIONS, BULLMQ_WORKER_OPTIONS, PGQUEUE_BUMP_OPTIONS, PGQUEUE_MODULE_OPTIONS } from './settings';

type Lib = 'bullmq' | 'pg-queue';
type Role = 'place-then-crash' | 'place-then-roll-back' | 'bump-then-crash' | 'worker';

const [lib, role, url] = process.argv.slice(2) as [Lib, Role, string];
const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: url, max: 12 }) });
const say = (line: string) => process.stdout.write(`${line}\n`);

/** Where the parent kills this process. Bounded: no orphan if the parent never does. */
async function crashPoint(line: string): Promise<void> {
  say(`CRASH-POINT ${line}`);
  await new Promise((resolve) => setTimeout(resolve, 60_000));
  say('NOT KILLED');
  process.exit(1);
}

async function recordRun(queue: string, ref: string): Promise<void> {
  await prisma.$executeRaw`INSERT INTO crash_demo_run (lib, queue, ref, pid) VALUES (${lib}, ${queue}, ${ref}, ${process.pid})`;
}

class PaymentDeclined extends Error {
  constructor(readonly orderId: number) {
    super('payment declined');
  }
}

// ---------------------------------------------------------------- BullMQ 6 on PostgreSQL
const connection = (): PostgresPoolConfig => ({ connectionString: url, max: 4, migrate: true });
const makeQueue = (name: string) => new Queue(name, { connection: connection() }, createPostgresBackend);

async function bullmq(): Promise<void> {
  const confirmations = makeQueue('order.confirm');
  confirmations.on('error', (err: Error) => console.error(`queue error: ${err.message}`));
  await confirmations.waitUntilReady();

  if (role === 'place-then-crash') {
    const order = await prisma.order.create({ data: { customer: 'bullmq:a', amountCents: 1200 } });
    await crashPoint(String(order.id)); // the process dies here: committed, not yet added
    await confirmations.add('confirm', { orderId: order.id }, BULLMQ_JOB_OPTIONS);
  } else if (role === 'place-then-roll-back') {
    try {
      await prisma.$transaction(async (tx) => {
        const order = await tx.order.create({ data: { customer: 'bullmq:b', amountCents: 1200 } });
        await confirmations.add('confirm', { orderId: order.id }, BULLMQ_JOB_OPTIONS); // on BullMQ's own pool
        throw new PaymentDeclined(order.id);
      });
    } catch (err) {
      if (!(err instanceof PaymentDeclined)) throw err;
      say(`ROLLED-BACK ${err.orderId}`);
    }
    await confirmations.close();
  } else {
    const bumps = makeQueue('counter.bump');
    await bumps.waitUntilReady();
    const confirm = () =>
      new Worker('order.confirm', async (job) => {
        const { orderId } = job.data as { orderId: number };
        await recordRun('order.confirm', String(orderId));
        await prisma.order.update({ where: { id: orderId }, data: { status: 'confirmed' } });
      }, { connection: connection(), ...BULLMQ_WORKER_OPTIONS }, createPostgresBackend);
    const bump = () =>
      new Worker('counter.bump', async (job) => {
        await recordRun('counter.bump', String(job.id));
        await prisma.$executeRaw`UPDATE crash_demo_counter SET value = value + 1 WHERE lib = 'bullmq'`;
        if (role === 'bump-then-crash') await crashPoint('wrote'); // killed before the job completes
      }, { connection: connection(), ...BULLMQ_WORKER_OPTIONS }, createPostgresBackend);
    // The crashing instance runs the counter's worker only: the confirmations wait for the survivor.
    const workers = role === 'worker' ? [confirm(), bump()] : [bump()];
    for (const w of workers) {
      w.on('error', (err: Error) => console.error(`worker error: ${err.message}`));
      await w.waitUntilReady();
    }
    if (role === 'bump-then-crash') await bumps.add('bump', {}, BULLMQ_JOB_OPTIONS);
    say('READY');
    process.once('SIGTERM', () => {
      void (async () => {
        for (const w of workers) await w.close();
        await bumps.close();
        await confirmations.close();
        await prisma.$disconnect();
      })().finally(() => process.exit(0));
    });
    return;
  }
  await prisma.$disconnect();
}

// ---------------------------------------------------------------- pg-queue
@Injectable()
class Confirmations {
  @TaskHandler('order.confirm')
  async confirm(task: Task<{ orderId: number }>, ctx: TaskContext<Prisma.TransactionClient>) {
    await recordRun('order.confirm', String(task.payload.orderId));
    await ctx.tx.order.update({ where: { id: task.payload.orderId }, data: { status: 'confirmed' } });
  }
}

@Injectable()
class Counter {
  @TaskHandler('counter.bump', PGQUEUE_BUMP_OPTIONS)
  async bump(task: Task, ctx: TaskContext<Prisma.TransactionClient>) {
    await recordRun('counter.bump', task.id);
    await ctx.tx.$executeRaw`UPDATE crash_demo_counter SET value = value + 1 WHERE lib = 'pg-queue'`;
    if (role === 'bump-then-crash') await crashPoint('wrote'); // killed before the transaction commits
  }
}

async function pgQueue(): Promise<void> {
  const worker = role === 'worker' || role === 'bump-then-crash';
  const providers = role === 'worker' ? [Confirmations, Counter] : role === 'bump-then-crash' ? [Counter] : [];
  @Module({
    imports: [PgQueueModule.forRoot({ prisma, databaseUrl: url, installSchema: false, autoStart: worker, workerId: `${role}-${process.pid}`, ...PGQUEUE_MODULE_OPTIONS })],
    providers,
  })
  class CrashCasesModule {}
  const app: INestApplicationContext = await NestFactory.createApplicationContext(CrashCasesModule, { logger: ['error'] });
  const queue = app.get(TaskQueue);

  if (role === 'place-then-crash') {
    const order = await prisma.$transaction(async (tx) => {
      const created = await tx.order.create({ data: { customer: 'pg-queue:a', amountCents: 1200 } });
      await queue.enqueue('order.confirm', { orderId: created.id }, { tx }); // commits with the order
      return created;
    });
    await crashPoint(String(order.id)); // the same point: after the commit
  } else if (role === 'place-then-roll-back') {
    try {
      await prisma.$transaction(async (tx) => {
        const order = await tx.order.create({ data: { customer: 'pg-queue:b', amountCents: 1200 } });
        await queue.enqueue('order.confirm', { orderId: order.id }, { tx }); // in the transaction
        throw new PaymentDeclined(order.id);
      });
    } catch (err) {
      if (!(err instanceof PaymentDeclined)) throw err;
      say(`ROLLED-BACK ${err.orderId}`);
    }
  } else {
    if (role === 'bump-then-crash') await queue.enqueue('counter.bump', {});
    say('READY');
    process.once('SIGTERM', () => {
      void app.close().then(() => prisma.$disconnect()).finally(() => process.exit(0));
    });
    return;
  }
  await app.close();
  await prisma.$disconnect();
}

// Spawned with an IPC channel: when the parent goes, so does this process.
if (process.send) process.on('disconnect', () => process.exit(1));
(lib === 'bullmq' ? bullmq() : pgQueue()).then(
  // The workers run until SIGTERM; the IPC channel (with its listener) would keep this one alive.
  () => role === 'place-then-roll-back' && process.exit(0),
  (err: unknown) => {
    say(`FAILED ${(err as Error).stack ?? String(err)}`);
    process.exit(1);
  },
);
