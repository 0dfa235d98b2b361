// Compile-time only: the root type check (`tsc --noEmit`, run by scripts/test.js before any spec)
// compiles this file, and every `@ts-expect-error` below must be an error or tsc fails with
// "unused directive". A handler's context type follows the mode its decorator states.
import { Injectable } from '@nestjs/common';
import { TaskHandler, type AnyTaskContext, type LeaseTaskContext, type Task, type TaskContext } from '@app/pg-queue';
import type { Prisma } from '../../src/generated/prisma/client';

const leaseOptions = { mode: 'lease' as const, concurrency: 4 };

@Injectable()
export class ModeTypedHandlers {
  @TaskHandler('types.lease', { mode: 'lease' })
  async lease(task: Task<{ id: number }>, ctx: LeaseTaskContext): Promise<void> {
    // @ts-expect-error a lease-mode handler has no transaction
    void ctx.tx;
    await ctx.enqueue('types.next', { id: task.payload.id });
    await ctx.heartbeat();
    const mode: 'lease' = ctx.mode;
    void mode;
  }

  // @ts-expect-error lease mode stated, but the method wants a transactional context (ctx.tx)
  @TaskHandler('types.lease-wrong', { mode: 'lease' })
  async leaseWrong(_task: Task, ctx: TaskContext<Prisma.TransactionClient>): Promise<void> {
    await ctx.tx.order.findMany();
  }

  // @ts-expect-error the same through an options object declared elsewhere
  @TaskHandler('types.lease-wrong-2', leaseOptions)
  async leaseWrongShared(_task: Task, ctx: TaskContext): Promise<void> {
    void ctx.tx;
  }

  @TaskHandler('types.tx', { mode: 'transactional' })
  async tx(task: Task<{ id: number }>, ctx: TaskContext<Prisma.TransactionClient>): Promise<void> {
    await ctx.tx.order.update({ where: { id: task.payload.id }, data: { status: 'seen' } });
    const mode: 'transactional' = ctx.mode;
    void mode;
  }

  // @ts-expect-error transactional mode stated, but the method declares a lease context
  @TaskHandler('types.tx-wrong', { mode: 'transactional' })
  async txWrong(_task: Task, ctx: LeaseTaskContext): Promise<void> {
    void ctx;
  }

  // Mode not stated here (it may come from handlerDefaults or queues[...]): either context compiles.
  @TaskHandler('types.default-tx')
  async defaultTx(_task: Task, ctx: TaskContext<Prisma.TransactionClient>): Promise<void> {
    await ctx.tx.order.findMany();
  }

  @TaskHandler('types.default-lease', { concurrency: 2 })
  async defaultLease(_task: Task, ctx: LeaseTaskContext): Promise<void> {
    await ctx.heartbeat();
  }

  // Code shared by both modes takes either context and tells them apart by ctx.mode.
  @TaskHandler('types.shared', { mode: 'lease' })
  async shared(task: Task<{ id: number }>, ctx: AnyTaskContext<Prisma.TransactionClient>): Promise<void> {
    if (ctx.mode === 'transactional') await ctx.tx.order.findMany();
    // @ts-expect-error not narrowed: either mode
    void ctx.tx;
    void task;
  }

  // A handler that ignores its context, and one that takes no arguments, fit every mode.
  @TaskHandler('types.no-ctx', { mode: 'lease' })
  async noCtx(task: Task<{ id: number }>): Promise<void> {
    void task;
  }

  // A sandboxed queue: the module runs its tasks, the method body is never called.
  @TaskHandler('types.sandboxed', { mode: 'lease', sandbox: { module: __filename, kind: 'process' } })
  sandboxed(_task: Task<{ id: number }>): void {}

  // @ts-expect-error a sandbox is a worker thread or a child process
  @TaskHandler('types.sandbox-kind', { mode: 'lease', sandbox: { module: __filename, kind: 'fork' } })
  sandboxKind(): void {}
}
