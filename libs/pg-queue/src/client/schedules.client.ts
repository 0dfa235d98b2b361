import { InvalidArgumentError, ScheduleNameTakenError } from '../errors';
import { nextTick, validateRuntimeSchedule, type RuntimeScheduleOptions } from '../schedules/schedule.definition';
import { notifyChannel } from '../sql/identifiers';
import { ScheduleRepository, type StoredSchedule } from '../sql/schedule.repository';
import type { PrismaClientLike } from '../types';

export type { RuntimeScheduleOptions } from '../schedules/schedule.definition';

/** A schedule as `getSchedule` / `listSchedules` show it, declared or created at run time. */
export interface ScheduleInfo {
  name: string;
  queue: string;
  cron: string | null;
  /** The cron's IANA time zone (null for everyMs). */
  timezone: string | null;
  everyMs: number | null;
  payload: unknown;
  missed: 'skip' | 'once';
  nextRunAt: Date;
  lastRunAt: Date | null;
  updatedAt: Date;
  /** Declared in code (a handler's `schedule` or the `schedules` option): changed by a deploy, not by upsertSchedule. */
  declared: boolean;
}

/**
 * Runtime schedules (TaskQueue.upsertSchedule and friends): rows of `schedule_runtime`, beside the
 * declared ones' `schedule` (which older instances declare and retire by queue: they never touch
 * this table), ticked by the same pass on every instance (see ScheduleTicker), so a tick is
 * enqueued once however many instances run. Names are one namespace with declared schedules (see
 * ScheduleNameTakenError and schedule.sql.ts).
 */
export class ScheduleClient {
  private readonly repo: ScheduleRepository;
  private readonly channel: string;

  constructor(
    private readonly prisma: PrismaClientLike,
    schema: string,
    /** Where `list` reads (a replica, or `prisma`); `get` by name reads the primary. */
    private readonly reads: PrismaClientLike = prisma,
  ) {
    this.repo = new ScheduleRepository(schema);
    this.channel = notifyChannel(schema);
  }

  /** True when created, false when an existing runtime schedule was changed. */
  async upsert(name: string, options: RuntimeScheduleOptions): Promise<boolean> {
    const valid = validateRuntimeSchedule(name, options);
    const created = await this.repo.writeSchedule(this.prisma, 'runtime', { ...valid, firstTick: nextTick(valid, new Date()) }, this.channel);
    if (created === null) throw new ScheduleNameTakenError(name, 'code');
    return created;
  }

  async get(name: string): Promise<ScheduleInfo | null> {
    const [row] = await this.repo.readSchedules(this.prisma, scheduleName(name));
    return row ? scheduleInfo(row) : null;
  }

  async list(): Promise<ScheduleInfo[]> {
    return (await this.repo.readSchedules(this.reads, null)).map(scheduleInfo);
  }

  /** True when removed, false when there was no such schedule; a declared one is refused. */
  async remove(name: string): Promise<boolean> {
    const checked = scheduleName(name);
    const res = await this.repo.removeSchedule(this.prisma, checked);
    if (!res.removed && res.declared) throw new ScheduleNameTakenError(checked, 'code');
    return res.removed;
  }
}

function scheduleName(name: unknown): string {
  if (typeof name !== 'string' || name.length === 0 || name.length > 200 || name.includes('\u0000')) {
    throw new InvalidArgumentError('name', `expected a schedule name (a non-empty string of at most 200 characters), got ${JSON.stringify(name) ?? String(name)}`);
  }
  return name;
}

function scheduleInfo(r: StoredSchedule): ScheduleInfo {
  return {
    name: r.name,
    queue: r.queue,
    cron: r.cron,
    timezone: r.tz,
    everyMs: r.every_ms,
    payload: r.payload,
    missed: r.missed,
    nextRunAt: new Date(r.next_run_at),
    lastRunAt: r.last_run_at === null ? null : new Date(r.last_run_at),
    updatedAt: new Date(r.updated_at),
    declared: r.declared,
  };
}
