/**
 * The settings of the crash-cases demonstration, for both libraries, and their description for its
 * output. Everything not here is the library's default. The only timings changed are the ones that
 * decide how soon a killed worker's job is noticed (30 s for BullMQ's lock and stalled check, 60 s
 * for pg-queue's lease and 10 s for its dead-instance check by default): shortened alike, so the
 * demonstration takes seconds.
 */
import type { JobsOptions } from 'bullmq';
import type { PgQueueModuleOptions, TaskHandlerOptions } from '@app/pg-queue';

/** Every job the BullMQ app adds: 5 attempts, as pg-queue's default maxAttempts. */
export const BULLMQ_JOB_OPTIONS: JobsOptions = { attempts: 5, backoff: { type: 'fixed', delay: 200 } };

export const BULLMQ_WORKER_OPTIONS = { lockDuration: 2000, stalledInterval: 1000 };

export const PGQUEUE_MODULE_OPTIONS: Partial<PgQueueModuleOptions> = { rescueIntervalMs: 500, deadInstanceAfterMs: 1000 };

/** The counter's handler (case c); the confirmation's takes every default (transactional, 5 attempts). */
export const PGQUEUE_BUMP_OPTIONS: TaskHandlerOptions = { leaseMs: 2000 };

export function describeSettings(bullmqVersion: string): string[] {
  return [
    `BullMQ ${bullmqVersion} on PostgreSQL: new Queue/Worker(name, …, { connection: { connectionString, migrate: true } }, createPostgresBackend);`,
    `  jobs added with ${JSON.stringify(BULLMQ_JOB_OPTIONS)}; Worker ${JSON.stringify(BULLMQ_WORKER_OPTIONS)} (default 30000 each)`,
    `pg-queue: PgQueueModule.forRoot({ prisma, databaseUrl, ${Object.entries(PGQUEUE_MODULE_OPTIONS).map(([k, v]) => `${k}: ${v}`).join(', ')} }) (defaults 10000 and 2000);`,
    `  transactional handlers (the default), maxAttempts 5 (default); counter.bump ${JSON.stringify(PGQUEUE_BUMP_OPTIONS)} (default 60000)`,
  ];
}
