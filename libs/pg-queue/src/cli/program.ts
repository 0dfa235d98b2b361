import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command, CommanderError, InvalidArgumentError as BadFlag, Option } from 'commander';
import { TaskQueue } from '../client/task-queue.service';
import { DependenciesNotDoneError } from '../errors';
import { TaskEvents } from '../observability/task-events';
import { resolveModuleOptions } from '../pg-queue.options';
import { OperatorRepository } from '../sql/operator.repository';
import { installSchema } from '../sql/schema.installer';
import { printSchemaSql } from '../sql/schema.sql';
import { validateSchemaName } from '../sql/identifiers';
import { TaskRepository } from '../sql/task.repository';
import { TASK_STATES } from '../core/task-states';
import type { TaskState } from '../types';
import { CliFailure, EXIT, databaseUrl, failureOf, postgresUrl } from './cli.errors';
import { logLine, print, record, table, type Output } from './output';
import { progressText } from '../core/progress';
import { PgExecutor } from './pg.executor';
import { scheduleCommands } from './schedules.commands';
import { taskChangeCommands } from './task-changes.commands';

interface Global {
  databaseUrl?: string;
  readUrl?: string;
  schema: string;
  json: boolean;
}

const DURATION = /^(\d+)(ms|s|m|h|d)$/;
const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** The package's version, from its package.json (two levels up from src/cli and from dist/cli alike). */
function packageVersion(): string {
  return (JSON.parse(readFileSync(join(__dirname, '..', '..', 'package.json'), 'utf8')) as { version: string }).version;
}

/** A duration like 30m, 12h, 7d (ms, s, m, h, d), in ms. */
function duration(value: string): number {
  const m = DURATION.exec(value);
  if (!m) throw new BadFlag('expected a duration like 90s, 30m, 12h or 7d');
  return Number(m[1]) * UNIT_MS[m[2]];
}

function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new BadFlag('expected a positive integer');
  return n;
}

/**
 * Runs `fn` with a TaskQueue on the database: the library's own operator API and its checks. With
 * --read-url, its reads that count or list go to that replica (as an app's `readPrisma`), and the
 * primary is connected to only if the command needs it.
 */
async function withQueue<T>(g: Global, fn: (queue: TaskQueue, db: PgExecutor) => Promise<T>): Promise<T> {
  let url: string | null = null; // the primary's, once a statement needed it
  const db = new PgExecutor(() => (url = databaseUrl(g.databaseUrl)));
  let replica: PgExecutor | null = null;
  try {
    if (g.readUrl !== undefined) {
      const readUrl = postgresUrl(g.readUrl, '--read-url');
      replica = await PgExecutor.connect(readUrl, 'pg-queue cli reads').catch((err: unknown) => {
        throw failureOf(err, readUrl);
      });
    }
    const options = resolveModuleOptions({ prisma: db, readPrisma: replica ?? db, schema: g.schema, autoStart: false });
    const queue = new TaskQueue(options, new TaskRepository(options.schema, options.finished), new OperatorRepository(options.schema), new TaskEvents());
    return await fn(queue, db);
  } catch (err) {
    throw failureOf(err, url);
  } finally {
    await db.$disconnect().catch(() => undefined);
    await replica?.$disconnect().catch(() => undefined);
  }
}

const EXIT_CODES = `
Exit codes: 0 done; 1 not found or nothing to do (an unknown id, a task not in a state the action
applies to); 2 usage (a bad flag or argument); 3 the database (no URL, a bad URL, unreachable,
refused).`;

/** The `pg-queue` program. `out`/`err` receive everything it prints. */
export function program(out: (text: string) => void, err: (text: string) => void): { command: Command; exitCode: () => number } {
  let exitCode: number = EXIT.ok;
  const command = new Command('pg-queue')
    .description('Inspect and operate the pg-queue tables of a PostgreSQL database.')
    .version(packageVersion())
    .addOption(new Option('--database-url <url>', 'postgresql://USER:PASSWORD@HOST:5432/DATABASE (default: $DATABASE_URL)'))
    .addOption(new Option('--read-url <url>', 'a read replica for the reads that count or list (stats, list, schedules list); reads by id and every change stay on --database-url'))
    .option('--schema <name>', 'the queue\'s schema', 'pgqueue')
    .option('--json', 'print JSON (for scripts)', false)
    .addHelpText('after', EXIT_CODES)
    .showHelpAfterError('(add --help for usage)')
    .exitOverride()
    .configureOutput({ writeOut: out, writeErr: err });

  const global = (): Global => command.opts<Global>();
  const output = (): Output => ({ json: global().json, write: out });
  const notFound = (message: string) => {
    exitCode = EXIT.notFound;
    err(`${message}\n`);
  };

  command
    .command('stats')
    .description('counts by state per queue (the archive included) and the oldest due task')
    .action(() =>
      withQueue(global(), async (queue) => {
        const stats = await queue.stats();
        // A `paused` column only when something is paused: `yes` for a whole queue, else its paused partitions.
        // A `cooldownUntil` column likewise: the queue's cooldown end, else its partitions' (`key until time`).
        const shown = stats.map((s) => ({
          ...s,
          paused: s.paused ? 'yes' : s.pausedPartitions.length > 0 ? s.pausedPartitions.join(', ') : '',
          cooldownUntil: s.cooldownUntil?.toISOString() ?? s.cooldownPartitions.map((p) => `${p.partition || '(none)'} until ${p.until.toISOString()}`).join(', '),
        }));
        const columns = ['queue', 'pending', 'waiting', 'running', 'dead', 'done', 'cancelled', 'oldestDueMs', ...(['paused', 'cooldownUntil'] as const).filter((c) => shown.some((s) => s[c]))];
        print(output(), stats, () => (stats.length === 0 ? 'no tasks' : table(shown as never, columns)));
      }),
    );

  command
    .command('cooldowns')
    .alias('backoffs') // its name before this release; goes in the next
    .description('cooldowns in force (a handler\'s RateLimitedError): queues, partitions and limiters not claimed until their end')
    .action(() =>
      withQueue(global(), async (queue) => {
        const cooldowns = await queue.cooldowns();
        const shown = cooldowns.map((b) => ({ ...b, partition: b.partition ?? '', until: b.until.toISOString() }));
        print(output(), cooldowns, () => (cooldowns.length === 0 ? 'no cooldowns' : table(shown as never, ['scope', 'name', 'partition', 'until', 'reason'])));
      }),
    );

  command
    .command('list')
    .description('tasks, newest first')
    .option('--queue <queue>', 'only this queue')
    .addOption(new Option('--state <state>', 'only this state').choices(TASK_STATES))
    .option('--limit <n>', 'at most n tasks', positiveInt, 50)
    .option('--cursor <id>', 'the page after this task id (the last id of the previous page)')
    .action((o: { queue?: string; state?: TaskState; limit: number; cursor?: string }) =>
      withQueue(global(), async (queue) => {
        const tasks = await queue.list({ queue: o.queue, state: o.state, limit: o.limit, cursor: o.cursor });
        // A progress column only when some task reported progress (tables of other tasks unchanged).
        const shown = tasks.map((t) => ({ ...t, progress: progressText(t.progress) }));
        const columns = ['id', 'queue', 'state', 'attempt', ...(shown.some((t) => t.progress !== null) ? ['progress'] : []), 'runAt', 'finishedAt', 'lastError'];
        print(output(), tasks, () => (tasks.length === 0 ? 'no tasks' : table(shown as never, columns)));
      }),
    );

  command
    .command('show <id>')
    .description('one task, and the pipeline it belongs to')
    .action((id: string) =>
      withQueue(global(), async (queue) => {
        const task = await queue.get(id);
        if (!task) return notFound(`pg-queue: no task ${id}`);
        const chain = await queue.chain(id);
        print(output(), { ...task, chain }, () =>
          `${record(task as never)}${chain.length > 1 ? `\n\npipeline\n${table(chain as never, ['stage', 'id', 'queue', 'state', 'attempt'])}` : ''}`,
        );
      }),
    );

  command
    .command('logs <id>')
    .description("a task's log: its handlers' ctx.log lines and each failed attempt's error and run time")
    .action((id: string) =>
      withQueue(global(), async (queue) => {
        const logs = await queue.getLogs(id);
        if (!logs) return notFound(`pg-queue: no task ${id}`);
        print(output(), logs, () => (logs.length === 0 ? 'no log entries' : logs.map(logLine).join('\n')));
      }),
    );

  command
    .command('retry <id>')
    .description('a dead or cancelled task back to pending, attempts reset (not a dependant cancelled by its parent)')
    .action((id: string) =>
      withQueue(global(), async (queue) => {
        let retried: boolean;
        try {
          retried = await queue.retry(id);
        } catch (e) {
          if (e instanceof DependenciesNotDoneError) return notFound(e.message);
          throw e;
        }
        if (!retried) return notFound(`pg-queue: task ${id} is not dead or cancelled (or does not exist)`);
        print(output(), { id, retried }, () => `task ${id} is pending again`);
      }),
    );

  command
    .command('retry-dead')
    .description('every dead task of a queue back to pending (cancelled ones stay: retry <id> each)')
    .requiredOption('--queue <queue>', 'the queue')
    .option('--error-like <pattern>', 'only tasks whose last error matches this ILIKE pattern (e.g. %timeout%)')
    .action((o: { queue: string; errorLike?: string }) =>
      withQueue(global(), async (queue) => {
        const ids = await queue.retryDead({ queue: o.queue, errorLike: o.errorLike });
        if (ids.length === 0) exitCode = EXIT.notFound;
        print(output(), { queue: o.queue, retried: ids }, () => `${ids.length} task${ids.length === 1 ? '' : 's'} of ${o.queue} pending again`);
      }),
    );

  command
    .command('cancel <id>')
    .description('cancel a task: now if it waits, by request if it runs')
    .action((id: string) =>
      withQueue(global(), async (queue) => {
        const result = await queue.cancel(id);
        if (result === 'not-cancellable') return notFound(`pg-queue: task ${id} cannot be cancelled (finished, or no such task)`);
        print(output(), { id, result }, () => (result === 'cancelled' ? `task ${id} cancelled` : `task ${id} runs: cancel requested, its handler is aborted`));
      }),
    );

  taskChangeCommands(command, { withQueue: (fn) => withQueue(global(), fn), output, notFound, duration });

  // pause <queue> and resume <queue>: the same scope, the same output; exit 1 when there was nothing to do.
  for (const verb of ['pause', 'resume'] as const) {
    const [done, undone] = verb === 'pause' ? ['paused', 'was already paused'] : ['resumed', 'was not paused'];
    command
      .command(`${verb} <queue>`)
      .description(
        verb === 'pause'
          ? 'stop claiming the queue (or one partition) on every instance until resume; enqueue goes on, running tasks finish'
          : 'claim the paused queue (or partition) again; its workers are woken at once',
      )
      .option('--partition <key>', 'only this partition of the queue')
      .action((name: string, o: { partition?: string }) =>
        withQueue(global(), async (queue) => {
          const scope = o.partition === undefined ? {} : { partition: o.partition };
          const changed = verb === 'pause' ? await queue.pause(name, scope) : await queue.resume(name, scope);
          const what = o.partition === undefined ? name : `partition ${o.partition} of ${name}`;
          if (!changed) exitCode = EXIT.notFound;
          print(output(), { queue: name, partition: o.partition ?? null, [done]: changed }, () => `${what} ${changed ? done : undone}`);
        }),
      );
  }

  command
    .command('purge')
    .description('delete finished history for good (done, cancelled and dead tasks; never pending or running ones)')
    .option('--queue <queue>', 'only this queue (default: every queue)')
    .addOption(new Option('--state <state...>', 'the finished states to delete').choices(['done', 'cancelled', 'dead']).default(['done', 'cancelled']))
    .requiredOption('--older-than <duration>', 'finished longer ago than this (90s, 30m, 12h, 7d)', duration)
    .action((o: { queue?: string; state: ('done' | 'cancelled' | 'dead')[]; olderThan: number }) =>
      withQueue(global(), async (queue) => {
        const deleted = await queue.purge({ queue: o.queue, states: o.state, olderThanMs: o.olderThan });
        print(output(), { deleted }, () => `${deleted} task${deleted === 1 ? '' : 's'} deleted`);
      }),
    );

  scheduleCommands(command, { withQueue: (fn) => withQueue(global(), fn), output, notFound, duration });

  const schema = command.command('schema').description("the queue's tables: print their SQL or install them");
  schema
    .command('print')
    .description('the SQL of every migration, for prisma/migrations (recorded in schema_version: the installer then finds the schema current)')
    .action(() => {
      try {
        out(printSchemaSql(validateSchemaName(global().schema)));
      } catch (e) {
        throw failureOf(e, null);
      }
    });
  schema
    .command('install')
    .description('create or upgrade the tables now, as the app does at startup')
    .action(() =>
      withQueue(global(), async (_queue, db) => {
        const applied = await installSchema(db, validateSchemaName(global().schema));
        print(output(), { applied }, () => (applied.length === 0 ? 'schema current: nothing to do' : `applied migrations ${applied.join(', ')}`));
      }),
    );

  return { command, exitCode: () => exitCode };
}

/** Runs the CLI on `argv` (without node and the script); resolves with the exit code. */
export async function run(argv: string[], out: (text: string) => void, err: (text: string) => void): Promise<number> {
  const { command, exitCode } = program(out, err);
  try {
    await command.parseAsync(argv, { from: 'user' });
    return exitCode();
  } catch (e) {
    if (e instanceof CommanderError) {
      // --help and --version end here too, with exit code 0.
      return e.exitCode === 0 ? EXIT.ok : EXIT.usage;
    }
    const failure = failureOf(e, null);
    err(`${failure.message}\n`);
    return failure instanceof CliFailure ? failure.code : 1;
  }
}
