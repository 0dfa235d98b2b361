// Compile-time only (tsc --noEmit): the package's types give the user's own types back.
// Every `@ts-expect-error` below must be an error, or tsc fails with "unused directive".
import { Injectable } from '@nestjs/common';
import {
  PgQueueModule,
  TaskHandler,
  TaskQueue,
  type EnqueueOptions,
  type LeaseTaskContext,
  type PgQueueModuleOptions,
  type Task,
  type TaskContext,
} from '@pg-queue/nestjs';
import { drainQueue, pruneHistory, rescueExpiredLeases, tickSchedules } from '@pg-queue/nestjs/testing';
import type { INestApplicationContext } from '@nestjs/common';
import type { Order, Prisma, PrismaClient } from './generated/prisma/client';

@Injectable()
export class TypedHandlers {
  @TaskHandler('order.check')
  async check(task: Task<{ orderId: number; note?: string }>, ctx: TaskContext<Prisma.TransactionClient>): Promise<void> {
    const id: number = task.payload.orderId;
    const note: string | undefined = task.payload.note;
    // @ts-expect-error a payload field the task does not have
    void task.payload.orderID;
    // @ts-expect-error orderId is a number, not a string
    const wrong: string = task.payload.orderId;
    const order: Order = await ctx.tx.order.update({ where: { id }, data: { status: note ?? 'checked' } });
    // @ts-expect-error the business model's fields are typed: status is a string
    await ctx.tx.order.update({ where: { id }, data: { status: 42 } });
    // @ts-expect-error there is no such model in this app's schema
    await ctx.tx.invoice.findMany();
    // @ts-expect-error Task is read-only
    task.attempt = 2;
    await ctx.enqueue('order.checked', { orderId: order.id }, { delayMs: 1000, group: `customer-${order.customer}` });
    void wrong;
  }
}

/** The handler's context follows the mode its decorator states: a mismatch does not compile. */
@Injectable()
export class ModeTypedHandlers {
  @TaskHandler('order.notify', { mode: 'lease' })
  async notify(task: Task<{ orderId: number }>, ctx: LeaseTaskContext): Promise<void> {
    // @ts-expect-error a lease-mode handler has no transaction
    void ctx.tx;
    await ctx.heartbeat();
    void task;
  }

  // @ts-expect-error lease mode stated, but the method wants a transactional context
  @TaskHandler('order.notify-wrong', { mode: 'lease' })
  async notifyWrong(_task: Task, ctx: TaskContext<Prisma.TransactionClient>): Promise<void> {
    await ctx.tx.order.findMany();
  }
}

export async function enqueueTyped(prisma: PrismaClient, queue: TaskQueue): Promise<string> {
  const options: EnqueueOptions<Prisma.TransactionClient> = { priority: -1, key: 'k', onConflict: 'rerun' };
  // @ts-expect-error onConflict is one of 'ignore' | 'replace' | 'rerun'
  const bad: EnqueueOptions = { onConflict: 'overwrite' };
  void bad;
  return prisma.$transaction(async (tx) => queue.enqueue('order.check', { orderId: 1 }, { ...options, tx }));
}

export function moduleOptions(prisma: PrismaClient): PgQueueModuleOptions {
  // A real PrismaClient satisfies the structural PrismaClientLike without casts.
  PgQueueModule.forRoot({ prisma });
  // @ts-expect-error prisma is required
  PgQueueModule.forRoot({ databaseUrl: 'postgres://x' });
  // @ts-expect-error handler modes are 'transactional' | 'lease'
  PgQueueModule.forRoot({ prisma, handlerDefaults: { mode: 'eventually' } });
  return { prisma, queues: { 'order.check': { concurrency: 2, backoff: { type: 'fixed', delayMs: 500 } } } };
}

export async function testingHelpers(app: INestApplicationContext): Promise<number> {
  const ran: number = await drainQueue(app, 'order.check');
  const rescued: { rescued: number; dead: number } = await rescueExpiredLeases(app);
  const ticks: number = await tickSchedules(app);
  const pruned: { archived: number; dead: number } = await pruneHistory(app);
  return ran + rescued.rescued + ticks + pruned.archived;
}

// Payload types by queue name, declared once (the package's QueuePayloads, module augmentation).
declare module '@pg-queue/nestjs' {
  interface QueuePayloads {
    'consumer.typed': { orderId: number };
  }
}

export async function typedQueues(queue: TaskQueue): Promise<void> {
  await queue.enqueue('consumer.typed', { orderId: 1 });
  // @ts-expect-error the declared payload is checked
  await queue.enqueue('consumer.typed', { orderID: 1 });
}

@Injectable()
export class TypedHandler {
  // @ts-expect-error a handler whose task type contradicts the declared payload
  @TaskHandler('consumer.typed')
  async run(task: Task<{ orderId: string }>) {
    void task;
  }
}
