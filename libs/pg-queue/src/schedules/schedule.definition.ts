import { Cron } from 'croner';
import { HandlerConfigurationError } from '../errors';
import { serialisePayload, validateQueueName } from '../core/task-input';

/**
 * A periodic task declared in code: a cron expression (seconds optional, with a time zone) or a
 * fixed interval. After downtime, `missed: 'skip'` (default) drops the ticks that were missed;
 * `'once'` enqueues one catch-up task for all of them. Never a flood.
 */
export interface ScheduleOptions {
  cron?: string;
  /** IANA time zone for `cron`. Default UTC. */
  tz?: string;
  everyMs?: number;
  payload?: unknown;
  missed?: 'skip' | 'once';
  /** Unique name; defaults to the queue name. */
  name?: string;
}

export interface ScheduleDefinition extends ScheduleOptions {
  queue: string;
}

export interface ValidSchedule {
  name: string;
  queue: string;
  cron: string | null;
  tz: string | null;
  everyMs: number | null;
  payloadJson: string;
  missed: 'skip' | 'once';
}

/** Validates a declaration; `where` names the handler or option in the error. */
export function validateSchedule(def: ScheduleDefinition, where: string): ValidSchedule {
  const fail = (reason: string): never => {
    throw new HandlerConfigurationError(`pg-queue: ${where}: invalid schedule: ${reason}`);
  };
  const queue = validateQueueName(def.queue);
  if ((def.cron === undefined) === (def.everyMs === undefined)) fail('give exactly one of cron and everyMs');
  if (def.everyMs !== undefined && (!Number.isInteger(def.everyMs) || def.everyMs < 100)) fail('everyMs must be an integer >= 100');
  if (def.tz !== undefined && def.cron === undefined) fail('tz only applies to cron');
  if (def.missed !== undefined && def.missed !== 'skip' && def.missed !== 'once') fail(`missed must be 'skip' or 'once'`);
  const name = def.name ?? queue;
  if (typeof name !== 'string' || name.length === 0 || name.length > 200) fail('name must be a non-empty string');
  const valid: ValidSchedule = {
    name,
    queue,
    cron: def.cron ?? null,
    tz: def.cron !== undefined ? def.tz ?? 'UTC' : null,
    everyMs: def.everyMs ?? null,
    payloadJson: serialisePayload(queue, def.payload ?? {}, 64 * 1024),
    missed: def.missed ?? 'skip',
  };
  try {
    nextTick(valid, new Date());
  } catch (err) {
    fail((err as Error).message);
  }
  return valid;
}

/** The first tick strictly after `after`. */
export function nextTick(s: { cron: string | null; tz: string | null; everyMs: number | null }, after: Date): Date {
  if (s.everyMs !== null) return new Date(Math.floor(after.getTime() / s.everyMs) * s.everyMs + s.everyMs);
  const next = new Cron(s.cron!, { timezone: s.tz ?? 'UTC', paused: true }).nextRun(after);
  if (!next) throw new Error(`cron "${s.cron}" has no future run`);
  return next;
}

/**
 * How late a tick may be and still count as on time (fired, so a briefly busy ticker catches up
 * exactly): twice the schedule's period, at least 2 s and at most 60 s. An older tick was missed
 * (no instance was running): dropped, or folded into one catch-up task.
 */
export function onTimeWindowMs(s: { cron: string | null; tz: string | null; everyMs: number | null }, at: Date): number {
  const first = nextTick(s, at);
  const period = nextTick(s, first).getTime() - first.getTime();
  return Math.min(60_000, Math.max(2_000, 2 * period));
}

/** Which ticks of a due schedule to enqueue now, and the next tick after `now`. */
export function dueTicks(
  s: { cron: string | null; tz: string | null; everyMs: number | null; missed: 'skip' | 'once' },
  nextRunAt: Date,
  now: Date,
): { fire: Date[]; next: Date } {
  const fire: Date[] = [];
  let tick = nextRunAt;
  const onTimeFrom = now.getTime() - onTimeWindowMs(s, nextRunAt);
  if (tick.getTime() < onTimeFrom) {
    if (s.missed === 'once') fire.push(tick);
    // Jump past the missed ticks without walking them one by one.
    tick = nextTick(s, new Date(onTimeFrom - 1));
  }
  while (tick.getTime() <= now.getTime() && fire.length < 1000) {
    fire.push(tick);
    tick = nextTick(s, tick);
  }
  return { fire, next: tick };
}
