// CommonJS consumer: boots a Nest app with the installed package, enqueues a task in the same
// Prisma transaction as a business row, waits for the worker (woken by LISTEN/NOTIFY) to run the
// handler, closes the app, and then must exit on its own (no leaked connection or timer).
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { PgQueueModule, TaskHandler, TaskQueue, printSchemaSql, type Task, type TaskContext, type TaskEvent } from '@pg-queue/nestjs';
import { drainQueue } from '@pg-queue/nestjs/testing';
import { firstValueFrom, filter } from 'rxjs';
import type { Prisma } from './generated/prisma/client';
import { createPrisma } from './prisma';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('DATABASE_URL is not set');
const prisma = createPrisma(url);

@Injectable()
class OrderHandlers {
  @TaskHandler('order.ship', { maxAttempts: 3 })
  async ship(task: Task<{ orderId: number }>, ctx: TaskContext<Prisma.TransactionClient>): Promise<void> {
    await ctx.tx.order.update({ where: { id: task.payload.orderId }, data: { status: 'shipped' } });
  }
}

@Module({
  imports: [PgQueueModule.forRoot({ prisma, databaseUrl: url, shutdownTimeoutMs: 5000 })],
  providers: [OrderHandlers],
})
class AppModule {}

async function main(): Promise<void> {
  const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error', 'warn'] });
  app.enableShutdownHooks();
  const queue = app.get(TaskQueue);

  // A rolled-back transaction leaves neither the order nor its task.
  await prisma
    .$transaction(async (tx) => {
      const order = await tx.order.create({ data: { customer: 'rolled back' } });
      await queue.enqueue('order.ship', { orderId: order.id }, { tx });
      throw new Error('rollback');
    })
    .catch((err: Error) => {
      if (err.message !== 'rollback') throw err;
    });

  const completed = firstValueFrom(queue.events$.pipe(filter((e: TaskEvent) => e.type === 'completed')));
  const { order, taskId } = await prisma.$transaction(async (tx) => {
    const order = await tx.order.create({ data: { customer: 'ada' } });
    const taskId = await queue.enqueue('order.ship', { orderId: order.id }, { tx });
    return { order, taskId };
  });
  const event = await completed;
  const shipped = await prisma.order.findUniqueOrThrow({ where: { id: order.id } });
  const task = await queue.get(taskId);
  const drained = await drainQueue(app); // nothing left to run
  const orders = await prisma.order.count();
  const stats = await queue.stats();
  await app.close();
  await prisma.$disconnect();
  const result = {
    format: typeof require === 'function' ? 'cjs' : 'esm',
    eventTaskId: event.taskId,
    taskId,
    status: shipped.status,
    taskState: task?.state,
    drained,
    orders,
    stats,
    schemaSqlBytes: printSchemaSql('pgqueue').length,
  };
  console.log(`RESULT ${JSON.stringify(result)}`);
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
