import { PrismaPg } from '@prisma/adapter-pg';
import { queueStatementName } from '@pg-queue/nestjs';
import { PrismaClient } from './generated/prisma/client';

/** Prisma 7: the queue's statements as named prepared statements. */
export function createPrisma(connectionString: string): PrismaClient {
  return new PrismaClient({ adapter: new PrismaPg({ connectionString, max: 5 }, { statementNameGenerator: queueStatementName }) });
}
