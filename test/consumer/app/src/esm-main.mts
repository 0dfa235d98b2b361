// ES-module consumer: the CommonJS package through Node's CJS interop (named imports from the
// root and from /testing). Workers are not started (autoStart: false); drainQueue runs the task.
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { PgQueueModule, TaskHandler, TaskQueue, type Task, type TaskContext } from '@pg-queue/nestjs';
import { drainQueue } from '@pg-queue/nestjs/testing';
import type { Prisma } from './generated/prisma/client.js';
import { createPrisma } from './prisma.js';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('DATABASE_URL is not set');
const prisma = createPrisma(url);

@Injectable()
class OrderHandlers {
  @TaskHandler('order.ship')
  async ship(task: Task<{ orderId: number }>, ctx: TaskContext<Prisma.TransactionClient>): Promise<void> {
    await ctx.tx.order.update({ where: { id: task.payload.orderId }, data: { status: 'shipped-esm' } });
  }
}

@Module({ imports: [PgQueueModule.forRoot({ prisma, autoStart: false })], providers: [OrderHandlers] })
class AppModule {}

const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error', 'warn'] });
const queue = app.get(TaskQueue);
const { order, taskId } = await prisma.$transaction(async (tx) => {
  const order = await tx.order.create({ data: { customer: 'grace' } });
  const taskId = await queue.enqueue('order.ship', { orderId: order.id }, { tx });
  return { order, taskId };
});
const drained = await drainQueue(app);
const shipped = await prisma.order.findUniqueOrThrow({ where: { id: order.id } });
const task = await queue.get(taskId);
await app.close();
await prisma.$disconnect();
console.log(`RESULT ${JSON.stringify({ format: typeof require === 'function' ? 'cjs' : 'esm', taskId, drained, status: shipped.status, taskState: task?.state })}`);
