import { InvalidArgumentError as BadFlag, Option, type Command } from 'commander';
import type { TaskQueue } from '../client/task-queue.service';
import type { ScheduleInfo } from '../client/schedules.client';
import { print, record, table, type Output } from './output';

/** What the schedule commands need of the program (see program.ts). */
export interface ScheduleCommandContext {
  withQueue<T>(fn: (queue: TaskQueue) => Promise<T>): Promise<T>;
  output(): Output;
  /** Prints the message and sets exit code 1. */
  notFound(message: string): void;
  duration(value: string): number;
}

const UNITS: [string, number][] = [['d', 86_400_000], ['h', 3_600_000], ['m', 60_000], ['s', 1000]];

/** An interval as the --every flag takes it: 90s, 1m, 12h (ms when nothing larger divides it). */
function every(ms: number | null): string | null {
  if (ms === null) return null;
  const [unit, size] = UNITS.find(([, size]) => ms % size === 0) ?? ['ms', 1];
  return `${ms / size}${unit}`;
}

function json(value: string): unknown {
  try {
    return JSON.parse(value);
  } catch {
    throw new BadFlag('expected JSON, e.g. \'{"report":"daily"}\'');
  }
}

const shown = (s: ScheduleInfo) => ({ ...s, every: every(s.everyMs), declared: s.declared ? 'yes' : 'no' });

/**
 * `pg-queue schedules list|show|upsert|remove`: runtime schedules (TaskQueue.upsertSchedule and
 * friends, their checks and errors); declared ones are listed and shown, never changed.
 */
export function scheduleCommands(command: Command, ctx: ScheduleCommandContext): void {
  const schedules = command.command('schedules').description('schedules: list every one; create, change or remove those made at run time');

  schedules
    .command('list')
    .description('every schedule, declared in code or made at run time, by name')
    .action(() =>
      ctx.withQueue(async (queue) => {
        const all = await queue.listSchedules();
        const columns = ['name', 'queue', 'every', 'cron', 'timezone', 'missed', 'nextRunAt', 'lastRunAt', 'declared'];
        print(ctx.output(), all, () => (all.length === 0 ? 'no schedules' : table(all.map(shown) as never, columns)));
      }),
    );

  schedules
    .command('show <name>')
    .description('one schedule, its payload included')
    .action((name: string) =>
      ctx.withQueue(async (queue) => {
        const s = await queue.getSchedule(name);
        if (!s) return ctx.notFound(`pg-queue: no schedule ${name}`);
        print(ctx.output(), s, () => record(shown(s) as never));
      }),
    );

  schedules
    .command('upsert <name>')
    .description('create or change a runtime schedule: every instance enqueues each tick once')
    .requiredOption('--queue <queue>', 'the queue its tasks go to')
    .option('--cron <expression>', 'a cron expression (seconds optional), e.g. "0 3 * * *"')
    .option('--timezone <zone>', 'the IANA time zone of --cron (default UTC)')
    .option('--every <duration>', 'a fixed interval instead of --cron (ms, s, m, h, d), e.g. 90s', ctx.duration)
    .option('--payload <json>', 'the payload of each task (default {})', json)
    .addOption(new Option('--missed <mode>', 'after downtime: skip the missed ticks, or enqueue one task for them').choices(['skip', 'once']))
    .action((name: string, o: { queue: string; cron?: string; timezone?: string; every?: number; payload?: unknown; missed?: 'skip' | 'once' }) =>
      ctx.withQueue(async (queue) => {
        const options = { queue: o.queue, cron: o.cron, timezone: o.timezone, everyMs: o.every, payload: o.payload, missed: o.missed };
        // Absent flags are absent options (validation tells "not given" from "given as undefined").
        const given = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)) as typeof options;
        const created = await queue.upsertSchedule(name, given);
        print(ctx.output(), { name, created }, () => `schedule ${name} ${created ? 'created' : 'changed'}`);
      }),
    );

  schedules
    .command('remove <name>')
    .description('remove a runtime schedule: no instance enqueues it again (a declared one is removed from the code)')
    .action((name: string) =>
      ctx.withQueue(async (queue) => {
        if (!(await queue.removeSchedule(name))) return ctx.notFound(`pg-queue: no schedule ${name}`);
        print(ctx.output(), { name, removed: true }, () => `schedule ${name} removed`);
      }),
    );
}
