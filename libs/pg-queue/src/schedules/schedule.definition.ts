import { Cron } from 'croner';
import { InvalidScheduleError, PayloadTooLargeError, PgQueueError } from '../errors';
import { serialisePayload, validateQueueName } from '../core/task-input';
import { rejectUnknownOptions } from '../option-keys';

/**
 * At most 366 days: longer periods read better as cron, and a huge interval puts the first tick past
 * what Date and timestamptz hold (1e15 ms lands in the year 33658, which Postgres cannot parse).
 */
const MAX_EVERY_MS = 366 * 86_400_000;
/** The limit for schedule payloads, fixed whatever the module's maxPayloadBytes. */
const MAX_PAYLOAD_BYTES = 64 * 1024;

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

const SCHEDULE_KEYS = Object.keys({ queue: true, cron: true, tz: true, everyMs: true, payload: true, missed: true, name: true } satisfies Record<keyof ScheduleDefinition, true>);

export interface ValidSchedule {
  name: string;
  queue: string;
  cron: string | null;
  tz: string | null;
  everyMs: number | null;
  payloadJson: string;
  missed: 'skip' | 'once';
}

/**
 * Validates a declaration; `path` is where it was given (`schedules[1]`, `@TaskHandler("q").schedule`)
 * and `where` the handler method if any, for the error. Everything the database would refuse
 * (U+0000, out-of-range times) is caught here, at startup, before any schedule is written.
 */
export function validateSchedule(def: ScheduleDefinition, path: string, where?: string, tzOption = 'tz'): ValidSchedule {
  const fail = (option: string | null, reason: string): never => {
    // The runtime API calls the time zone `timezone` (see validateRuntimeSchedule).
    throw new InvalidScheduleError(option === null ? path : `${path}.${option === 'tz' ? tzOption : option}`, reason, where);
  };
  /** Runs a shared validator and restates its typed error as one naming this schedule and option. */
  const restate = <T>(option: string, check: () => T): T => {
    try {
      return check();
    } catch (err) {
      // PayloadTooLargeError names maxPayloadBytes, which is not the limit here
      if (err instanceof PayloadTooLargeError) fail(option, `${err.bytes} bytes of JSON, over the ${MAX_PAYLOAD_BYTES}-byte limit for schedule payloads`);
      if (err instanceof PgQueueError) fail(option, err.message.replace(/^pg-queue: /, ''));
      throw err;
    }
  };
  if (typeof def !== 'object' || def === null) fail(null, `expected an object, got ${String(def)}`);
  rejectUnknownOptions(def, SCHEDULE_KEYS, fail);
  const queue = restate('queue', () => validateQueueName(def.queue));
  if ((def.cron === undefined) === (def.everyMs === undefined)) fail('cron', 'give exactly one of cron and everyMs');
  if (def.cron !== undefined && (typeof def.cron !== 'string' || def.cron.includes('\u0000'))) fail('cron', 'expected a cron expression string');
  if (def.everyMs !== undefined && (!Number.isInteger(def.everyMs) || def.everyMs < 100 || def.everyMs > MAX_EVERY_MS)) {
    fail('everyMs', `expected an integer from 100 to ${MAX_EVERY_MS} (366 days), got ${String(def.everyMs)}`);
  }
  if (def.tz !== undefined) {
    if (def.cron === undefined) fail('tz', 'only applies to cron');
    // croner does not refuse '' or a non-string: it would quietly use some other zone.
    if (typeof def.tz !== 'string' || def.tz.length === 0) fail('tz', `expected an IANA time zone name, got ${JSON.stringify(def.tz)}`);
    try {
      new Cron('0 * * * *', { timezone: def.tz, paused: true }).nextRun();
    } catch {
      fail('tz', `unknown time zone ${JSON.stringify(def.tz)}`);
    }
  }
  if (def.missed !== undefined && def.missed !== 'skip' && def.missed !== 'once') fail('missed', `expected 'skip' or 'once', got ${JSON.stringify(def.missed)}`);
  const name = def.name ?? queue;
  // The name is the row's primary key: text Postgres can store unchanged (no U+0000, no lone surrogate).
  if (typeof name !== 'string' || name.length === 0 || name.length > 200 || name.includes('\u0000') || Buffer.from(name, 'utf8').toString('utf8') !== name) {
    fail('name', 'expected a non-empty string of at most 200 characters, without U+0000 or unpaired UTF-16 surrogates');
  }
  const valid: ValidSchedule = {
    name,
    queue,
    cron: def.cron ?? null,
    tz: def.cron !== undefined ? def.tz ?? 'UTC' : null,
    everyMs: def.everyMs ?? null,
    payloadJson: restate('payload', () => serialisePayload(queue, def.payload ?? {}, MAX_PAYLOAD_BYTES)),
    missed: def.missed ?? 'skip',
  };
  try {
    nextTick(valid, new Date());
  } catch (err) {
    fail(def.cron !== undefined ? 'cron' : 'everyMs', (err as Error).message);
  }
  return valid;
}

/**
 * A schedule created at run time (TaskQueue.upsertSchedule): the name is given apart, the time
 * zone is `timezone`. Same rules as a declaration (same limits, same messages), path
 * `upsertSchedule("name")`.
 */
export interface RuntimeScheduleOptions {
  queue: string;
  cron?: string;
  /** IANA time zone for `cron`. Default UTC. */
  timezone?: string;
  everyMs?: number;
  payload?: unknown;
  missed?: 'skip' | 'once';
}

const RUNTIME_KEYS = Object.keys({ queue: true, cron: true, timezone: true, everyMs: true, payload: true, missed: true } satisfies Record<keyof RuntimeScheduleOptions, true>);

export function validateRuntimeSchedule(name: string, options: RuntimeScheduleOptions): ValidSchedule {
  const path = `upsertSchedule(${JSON.stringify(name) ?? String(name)})`;
  const fail = (option: string | null, reason: string): never => {
    throw new InvalidScheduleError(option === null ? path : `${path}.${option}`, reason);
  };
  if (typeof options !== 'object' || options === null || Array.isArray(options)) fail(null, `expected an object, got ${String(options)}`);
  rejectUnknownOptions(options, RUNTIME_KEYS, fail, { tz: 'the runtime API names the time zone "timezone"', name: 'the name is upsertSchedule\'s first argument' });
  // An absent name must not default to the queue's, as a declaration's does.
  if (typeof name !== 'string' || name.length === 0) fail('name', 'expected a non-empty string of at most 200 characters, without U+0000 or unpaired UTF-16 surrogates');
  const { timezone, ...rest } = options;
  return validateSchedule({ ...rest, ...(timezone === undefined ? {} : { tz: timezone }), name }, path, undefined, 'timezone');
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
