// Compile-time only (see handler-modes.ts): payload types declared once per queue name, in
// QueuePayloads, reach enqueue, ctx.enqueue and a handler's task. Queue names unique to this file:
// the augmentation applies to the whole program.
import { Injectable } from '@nestjs/common';
import { TaskHandler, TaskQueue, type LeaseTaskContext, type Task, type TaskContext } from '@app/pg-queue';

declare module '@app/pg-queue' {
  interface QueuePayloads {
    'typed.invoice': { invoiceId: number; total: number };
    'typed.receipt': { invoiceId: number };
  }
}

@Injectable()
export class TypedQueueHandlers {
  constructor(private readonly queue: TaskQueue) {}

  async enqueueThem(): Promise<void> {
    await this.queue.enqueue('typed.invoice', { invoiceId: 1, total: 990 });
    // @ts-expect-error a declared queue's payload is checked: total is missing
    await this.queue.enqueue('typed.invoice', { invoiceId: 1 });
    // @ts-expect-error and its fields' types
    await this.queue.enqueue('typed.receipt', { invoiceId: '1' });
    // A queue not declared takes any payload.
    await this.queue.enqueue('typed.anything', { whatever: true });
    // enqueueMany checks each item by its own queue name.
    await this.queue.enqueueMany([
      { queue: 'typed.invoice', payload: { invoiceId: 1, total: 990 } },
      { queue: 'typed.receipt', payload: { invoiceId: 1 } },
      { queue: 'typed.anything', payload: 42 },
    ]);
    // @ts-expect-error the second item's payload is the first queue's
    await this.queue.enqueueMany([{ queue: 'typed.invoice', payload: { invoiceId: 1, total: 990 } }, { queue: 'typed.receipt', payload: { invoiceId: 1, total: 990 } }]);
    const built: { queue: string; payload: unknown }[] = [];
    await this.queue.enqueueMany(built); // items built at run time: not checked
  }

  // The task's payload follows the queue name.
  @TaskHandler('typed.invoice')
  async invoice(task: Task<{ invoiceId: number; total: number }>, ctx: TaskContext) {
    const total: number = task.payload.total;
    void total;
    await ctx.enqueue('typed.receipt', { invoiceId: task.payload.invoiceId });
    // @ts-expect-error ctx.enqueue checks a declared queue's payload too
    await ctx.enqueue('typed.receipt', { invoice: task.payload.invoiceId });
    // The parents' results: unknown unless the handler states their type.
    const untyped = await ctx.parentResults();
    // @ts-expect-error unknown values cannot be used as numbers
    void (untyped['1'] + 1);
    const pages: number = (await ctx.parentResults<{ pages: number }>())['1'].pages;
    void pages;
  }

  // @ts-expect-error the method's task type does not match the queue's declared payload
  @TaskHandler('typed.receipt', { mode: 'lease' })
  async receipt(task: Task<{ receiptNo: string }>, _ctx: LeaseTaskContext) {
    void task;
  }

  // @ts-expect-error the same without a stated mode
  @TaskHandler('typed.receipt')
  async receiptAgain(task: Task<{ receiptNo: string }>) {
    void task;
  }

  // Without a declaration, any task type is accepted (the payload is not known).
  @TaskHandler('typed.free')
  async free(task: Task<{ anything: string[] }>) {
    void task;
  }
}
