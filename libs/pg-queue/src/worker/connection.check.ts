import type { Logger } from '@nestjs/common';
import type { RegisteredHandler } from '../discovery/task-handler.registry';
import { PgQueueError } from '../errors';
import type { ResolvedModuleOptions } from '../pg-queue.options';
import { prismaPoolMax } from '../prisma-adapter';
import type { OperatorRepository } from '../sql/operator.repository';
import { connectionBudget } from './connection.budget';

/**
 * Refuses a configuration whose connections the server cannot accept, and warns when the queue's
 * work will wait for the Prisma pool (see connection.budget.ts). Run when workers start.
 */
export async function checkConnectionBudget(operator: OperatorRepository, options: ResolvedModuleOptions, handlers: RegisteredHandler[], logger: Logger): Promise<void> {
  const server = await operator.connectionLimits(options.prisma);
  const budget = connectionBudget(handlers, Boolean(options.databaseUrl), { poolMax: prismaPoolMax(options.prisma), ...server });
  if (budget.refusal) throw new PgQueueError(`pg-queue: connection budget: ${budget.refusal}`);
  if (budget.warning) logger.warn(`connection budget: ${budget.warning}`);
}
