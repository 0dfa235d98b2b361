import { Injectable } from '@nestjs/common';
import { TaskHandler, type Task, type TaskContext } from '@app/pg-queue';
import type { Prisma } from '../generated/prisma/client';

/**
 * Every hour, on whichever instance's turn it is (each tick runs once across all instances),
 * summarise the previous hour's orders. The unique period makes a repeated run harmless.
 */
@Injectable()
export class ReportHandlers {
  @TaskHandler('reports.hourly', { schedule: { cron: '0 * * * *', tz: 'UTC', missed: 'once' } })
  async hourly(task: Task, ctx: TaskContext<Prisma.TransactionClient>): Promise<void> {
    const periodStart = new Date(task.runAt.getTime() - 3_600_000);
    const totals = await ctx.tx.order.aggregate({
      where: { createdAt: { gte: periodStart, lt: task.runAt } },
      _count: true,
      _sum: { amountCents: true },
    });
    await ctx.tx.report.upsert({
      where: { periodStart },
      create: { periodStart, orders: totals._count, revenueCents: BigInt(totals._sum.amountCents ?? 0) },
      update: {},
    });
  }
}
