import { InvalidArgumentError as BadFlag, Option, type Command } from 'commander';
import type { TaskChangeResult } from '../client/task-changes';
import type { ScheduleCommandContext } from './schedules.commands';
import { CliFailure, EXIT } from './cli.errors';
import { print } from './output';
import type { TaskQueue } from '../client/task-queue.service';

/** A time for `reschedule --at`: what Date parses (ISO 8601 best). */
function instant(value: string): Date {
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) throw new BadFlag('expected a date and time like 2026-12-01T09:00:00Z');
  return d;
}

/** A payload for `update-payload`: JSON text. */
function jsonArgument(value: string): unknown {
  try {
    return JSON.parse(value);
  } catch {
    throw new BadFlag('expected JSON, like \'{"to":"a@example.com"}\'');
  }
}

/** Why promote / reschedule / update-payload changed nothing (TaskChangeResult). */
const REFUSED: Record<Exclude<TaskChangeResult, 'changed'>, string> = {
  running: 'runs now',
  waiting: 'waits for the tasks it depends on',
  started: 'is a workflow that has started',
  finished: 'has finished',
  'not-found': 'does not exist',
};

/** promote, reschedule and update-payload (see TaskQueue): a task that has not run yet. */
export function taskChangeCommands(command: Command, ctx: ScheduleCommandContext): void {
  // promote, reschedule and update-payload: a task that has not run yet; exit 1 with the reason when refused.
  const change = (id: string, verb: string, what: () => string, run: (queue: TaskQueue) => Promise<TaskChangeResult>) =>
    ctx.withQueue(async (queue) => {
      const result = await run(queue);
      if (result !== 'changed') return ctx.notFound(`pg-queue: task ${id} not ${verb}: it ${REFUSED[result]}`);
      print(ctx.output(), { id, result }, what);
    });
  command
    .command('promote <id>')
    .description('run a pending task now (its workers are woken)')
    .action((id: string) => change(id, 'promoted', () => `task ${id} is due now`, (q) => q.promote(id)));
  command
    .command('reschedule <id>')
    .description('move a pending task\'s due time')
    .addOption(new Option('--at <time>', 'when it becomes due (ISO 8601)').argParser(instant).conflicts('in'))
    .addOption(new Option('--in <duration>', 'due this long from now, like 90s, 30m, 12h or 7d').argParser(ctx.duration))
    .action((id: string, o: { at?: Date; in?: number }) => {
      if (o.at === undefined && o.in === undefined) throw new CliFailure('pg-queue: reschedule needs --at <time> or --in <duration>', EXIT.usage);
      const to = o.at !== undefined ? { runAt: o.at } : { delayMs: o.in! };
      return change(id, 'rescheduled', () => `task ${id} is due ${o.at ? `at ${o.at.toISOString()}` : `in ${o.in} ms`}`, (q) => q.reschedule(id, to));
    });
  command
    .command('update-payload <id>')
    .argument('<json>', 'the new payload, as JSON', jsonArgument)
    .description('replace the payload of a task that has not started (never while it runs)')
    .action((id: string, payload: unknown) => change(id, 'changed', () => `task ${id} has its new payload`, (q) => q.updatePayload(id, payload)));
}
