import { Injectable } from '@nestjs/common';
import { Pool } from 'pg';
import { TaskHandler, WorkerOrchestrator, type PgQueueModuleOptions, type Task, type TaskContext } from '@app/pg-queue';
import type { Prisma, PrismaClient } from '../../src/generated/prisma/client';
import { bootQueueApp, type QueueApp } from './queue-app';
import { recordEffect, recordRun } from './task-ledger';

export const LEDGER_TX = 'ledger.tx';
export const LEDGER_LEASE = 'ledger.lease';

/**
 * Handlers that leave a ledger for the fault tests (see task-ledger.ts): `ledger.tx` writes its
 * effect row in ctx.tx; `ledger.lease` records its run on `runs`, a pool of its own outside the
 * queue's connections. Both then work for `workMs`. Options come from the module's `queues`.
 */
@Injectable()
export class LedgerHandlers {
  worker = '?';
  workMs = 5;
  runs: Pool | null = null;

  @TaskHandler(LEDGER_TX)
  async tx(task: Task, ctx: TaskContext<Prisma.TransactionClient>) {
    await recordEffect(ctx.tx, task, this.worker);
    await this.work();
  }

  @TaskHandler(LEDGER_LEASE, { mode: 'lease' })
  async lease(task: Task) {
    await recordRun(this.runs!, task, this.worker);
    await this.work();
  }

  private work() {
    return new Promise((resolve) => setTimeout(resolve, this.workMs));
  }
}

export interface LedgerWorker extends QueueApp {
  name: string;
  orchestrator: WorkerOrchestrator;
}

/**
 * Boots an app running LedgerHandlers as worker `name` and starts it once its handlers know who
 * they are. `ledgerUrl` is where lease runs are recorded (a direct connection, not the app's).
 */
export async function startLedgerWorker(
  name: string,
  prisma: PrismaClient,
  ledgerUrl: string,
  options: Partial<PgQueueModuleOptions>,
  workMs = 5,
  /** Runs before the worker starts claiming (e.g. to subscribe to its events without missing the first). */
  beforeStart?: (qa: QueueApp) => void,
): Promise<LedgerWorker> {
  const qa = await bootQueueApp(prisma, [LedgerHandlers], { ...options, autoStart: false, workerId: name });
  beforeStart?.(qa);
  const handlers = qa.app.get(LedgerHandlers);
  const runs = new Pool({ connectionString: ledgerUrl, max: 4, application_name: 'ledger' });
  runs.on('error', () => undefined); // an idle connection dropped (restart): the pool replaces it
  Object.assign(handlers, { worker: name, workMs, runs });
  const orchestrator = qa.app.get(WorkerOrchestrator);
  await orchestrator.start();
  return {
    ...qa,
    name,
    orchestrator,
    async close() {
      await qa.close();
      await runs.end().catch(() => undefined);
    },
  };
}
