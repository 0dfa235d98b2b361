import { Injectable } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { HealthIndicatorService, type HealthIndicatorResult } from '@nestjs/terminus';
import { within } from '../core/within';
import { InvalidArgumentError } from '../errors';
import type { UnfinishedUpgrade } from '../sql/schema.installer';
import { DEFAULT_CONNECTION, findRegistration } from '../pg-queue.connections';
import type { QueueHealth, WorkerOrchestrator } from '../worker/worker.orchestrator';

export interface PgQueueHealthOptions {
  /**
   * Down when a queue's oldest due task has waited longer than this many ms: one limit for every
   * queue, or limits by queue name (queues not named are not checked).
   */
  maxOldestDueMs?: number | Record<string, number>;
  /**
   * Down when a queue has had due tasks and no running instance handling it for longer than this
   * many ms (a typo in a @TaskHandler queue name, or no worker deployed), whichever instance
   * checks. Instances record the queues they handle (a running one renews its record every
   * rescueIntervalMs; one that died counts until its record expires, three intervals plus 10 s
   * later). Not checked by default.
   */
  maxUnhandledMs?: number;
  /** Down when the check itself takes longer (a database that does not answer). Default 5000 ms. */
  timeoutMs?: number;
  /** The PgQueueModule registration to check (see pg-queue.connections.ts). Default: the default one. */
  connection?: string;
  /**
   * Include the database's own error texts (a failed claim's, the database check's) in the
   * response. Default true; false for an endpoint anyone can reach: the texts can name tables,
   * roles and hosts, and the logs have them anyway.
   */
  errorText?: boolean;
}

/**
 * A `@nestjs/terminus` indicator for the queue of this process. Down when the database does not
 * answer, when the LISTEN connection is configured (`databaseUrl`) but lost, when a worker loop of
 * this process is not running or its claims fail, or when a queue's oldest due task waited past
 * `maxOldestDueMs`, or when a queue had due tasks and no running instance handling it for longer than
 * `maxUnhandledMs` (neither is checked for a queue paused or cooling down as a whole: its tasks wait by design), or when a schema upgrade stopped part-way and no instance is running it (a
 * migration left unfinished for over a minute with nobody holding the install lock: the next start
 * with `installSchema`, or `pg-queue schema install`, finishes it; migration 11 stopped there
 * fails archive inserts once its bound passes). The details always list what was checked.
 *
 * @example
 * ```ts
 * @Get('health') @HealthCheck()
 * check() {
 *   return this.health.check([() => this.queue.isHealthy('queue', { maxOldestDueMs: { 'email.send': 60_000 } })]);
 * }
 * ```
 */
@Injectable()
export class PgQueueHealthIndicator {
  constructor(
    private readonly indicators: HealthIndicatorService,
    private readonly moduleRef: ModuleRef,
  ) {}

  async isHealthy<const Key extends string = 'pg-queue'>(key: Key = 'pg-queue' as Key, options: PgQueueHealthOptions = {}): Promise<HealthIndicatorResult<Key>> {
    const limits = oldestDueLimits(options.maxOldestDueMs);
    const maxUnhandledMs = options.maxUnhandledMs === undefined ? undefined : validMs(options.maxUnhandledMs, 'maxUnhandledMs');
    const timeoutMs = options.timeoutMs ?? 5000;
    if (!Number.isInteger(timeoutMs) || timeoutMs < 1) throw new InvalidArgumentError('timeoutMs', `expected a positive integer, got ${String(timeoutMs)}`);
    const orchestrator = findRegistration<WorkerOrchestrator>(this.moduleRef, options.connection ?? DEFAULT_CONNECTION, 'orchestrator', 'PgQueueHealthIndicator');
    const check = this.indicators.check(key);
    // The orchestrator bounds its database check by timeoutMs and still reports the workers; the
    // outer bound is a backstop.
    const [health, upgrades] = await Promise.all([
      within(orchestrator.health(timeoutMs), timeoutMs + 1000, null),
      within(orchestrator.schemaUpgrades(), timeoutMs, null),
    ]);
    if (!health) return check.down({ problems: [`no answer within ${timeoutMs} ms`] });
    const problems = [...findProblems(health, limits, options.errorText ?? true, maxUnhandledMs), ...upgradeProblems(upgrades ?? [])];
    const details = {
      database: health.database.up ? 'up' : 'down',
      listen: health.listen,
      workers: health.workers.map((w) => ({
        queue: w.queue,
        alive: w.alive,
        state: w.state,
        running: w.running,
        ...(options.errorText === false ? {} : { lastClaimError: w.lastClaimError }),
      })),
      queues: health.queues.map((q) => ({
        queue: q.queue,
        due: q.due,
        running: q.running,
        dead: q.dead,
        waiting: q.waiting,
        oldestDueMs: q.oldestDueMs,
        handlers: q.handlers,
        unhandledMs: q.unhandledMs,
        paused: q.paused,
        pausedPartitions: q.pausedPartitions,
        coolingDown: q.coolingDown,
        backedOff: q.coolingDown,
      })),
      // Only while a migration is unfinished: another instance upgrading, or an upgrade stopped part-way.
      ...(upgrades?.length ? { schemaUpgrades: upgrades.map((u) => ({ version: u.version, name: u.name, stepsDone: u.stepsDone, since: u.since, installing: u.installing })) } : {}),
    };
    return problems.length > 0 ? check.down({ problems, ...details }) : check.up(details);
  }
}

/** What is wrong, one line each; without `errorText`, no text that came from the database. */
export function findProblems(health: QueueHealth, limits: (queue: string) => number | undefined, errorText = true, maxUnhandledMs?: number): string[] {
  const problems: string[] = [];
  if (!health.database.up) problems.push(errorText ? `database: ${health.database.error}` : 'database: down (see the logs)');
  if (health.listen === 'disconnected') problems.push('LISTEN connection lost (workers poll until it is back)');
  for (const w of health.workers) {
    if (!w.alive) problems.push(`worker "${w.queue}": ${w.state !== 'running' ? w.state : errorText ? `claims fail: ${w.lastClaimError}` : 'claims fail (see the logs)'}`);
  }
  for (const q of health.queues) {
    // A paused or backed-off queue's due tasks wait by design: neither overdue nor unhandled.
    if (q.paused || q.coolingDown) continue;
    const limit = limits(q.queue);
    if (limit !== undefined && q.oldestDueMs !== null && q.oldestDueMs > limit) {
      problems.push(`queue "${q.queue}": its oldest due task has waited ${Math.round(q.oldestDueMs)} ms (limit ${limit})`);
    }
    if (maxUnhandledMs !== undefined && q.unhandledMs !== null && q.unhandledMs > maxUnhandledMs) {
      problems.push(`queue "${q.queue}": ${q.due} due task${q.due === 1 ? '' : 's'} and no running instance has handled it for ${Math.round(q.unhandledMs)} ms (limit ${maxUnhandledMs})`);
    }
  }
  return problems;
}

/** Unfinished migrations nobody is installing, for over a minute (each step is recorded as it commits). */
function upgradeProblems(upgrades: UnfinishedUpgrade[]): string[] {
  return upgrades
    .filter((u) => !u.installing && Date.now() - new Date(u.since).getTime() > 60_000)
    .map(
      (u) =>
        `schema upgrade: migration ${u.version} (${u.name}) stopped after step ${u.stepsDone} at ${new Date(u.since).toISOString()} and no instance is running it: ` +
        'start one with installSchema, or run `pg-queue schema install`',
    );
}

function validMs(ms: unknown, where: string): number {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) throw new InvalidArgumentError(where, `expected a number of ms >= 0, got ${String(ms)}`);
  return ms;
}

function oldestDueLimits(option: PgQueueHealthOptions['maxOldestDueMs']): (queue: string) => number | undefined {
  if (option === undefined) return () => undefined;
  if (typeof option === 'number') {
    const limit = validMs(option, 'maxOldestDueMs');
    return () => limit;
  }
  if (typeof option !== 'object' || option === null) throw new InvalidArgumentError('maxOldestDueMs', 'expected a number or an object of numbers by queue');
  const byQueue = new Map(Object.entries(option).map(([q, ms]) => [q, validMs(ms, `maxOldestDueMs[${JSON.stringify(q)}]`)]));
  return (queue) => byQueue.get(queue);
}
