/**
 * The start of a fixture worker process (chaos-worker, limited-worker): a PgQueueModule app on
 * its own Prisma pool, schema already installed by the parent, booted with NestFactory (lighter
 * than @nestjs/testing: every restart pays for loading Nest). Prints "READY", or
 * "STARTUP FAILED <message>" and exits 1.
 */
import { Module, type Provider } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { PrismaPg } from '@prisma/adapter-pg';
import { PgQueueModule, type PgQueueModuleOptions } from '@app/pg-queue';
import { PrismaClient } from '../../src/generated/prisma/client';

export interface WorkerProcessConfig {
  url: string;
  worker: string;
  poolMax: number;
  providers: Provider[];
  options: Partial<PgQueueModuleOptions>;
}

export function startWorkerProcess(config: WorkerProcessConfig): void {
  const main = async () => {
    const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: config.url, max: config.poolMax }) });
    @Module({
      imports: [PgQueueModule.forRoot({ prisma, databaseUrl: config.url, installSchema: false, workerId: config.worker, ...config.options })],
      providers: config.providers,
    })
    class WorkerProcessModule {}
    await NestFactory.createApplicationContext(WorkerProcessModule, { logger: ['error', 'warn'] });
    process.stdout.write('READY\n');
  };
  main().catch((err: unknown) => {
    process.stdout.write(`STARTUP FAILED ${(err as Error).message}\n`);
    process.exit(1);
  });
}
