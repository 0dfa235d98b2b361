import { Gauge, type Registry } from 'prom-client';
import type { ResolvedModuleOptions } from '../pg-queue.options';
import { BackOffRepository } from '../sql/backoff.repository';
import { LimiterRepository } from '../sql/limiter.repository';

/**
 * The back-off and limiter gauges of QueueMetrics, read at scrape time (two small statements: the
 * back-offs in force, and each configured limiter's budget in use):
 * - `pgqueue_backoff_until_seconds{scope, name, partition}`: when a back-off in force ends (Unix
 *   seconds); a series exists only while it lasts.
 * - `pgqueue_limiter_running{limiter}`, `pgqueue_limiter_window_starts{limiter}`: a named
 *   limiter's running tasks and starts inside its rate window, over all of its queues.
 */
export function registerFlowGauges(registry: Registry, source: () => ResolvedModuleOptions): void {
  let repos: { cooldowns: BackOffRepository; limiters: LimiterRepository } | null = null;
  let reading: Promise<void> | null = null;
  const collect = (): Promise<void> =>
    (reading ??= read().finally(() => {
      reading = null;
    }));
  const until = new Gauge({
    name: 'pgqueue_cooldown_until_seconds',
    help: 'When a cooldown in force ends, Unix seconds (RateLimitedError: nothing of the scope is claimed until then); scope queue, partition or limiter',
    labelNames: ['scope', 'name', 'partition'],
    registers: [registry],
    collect,
  });
  const untilDeprecated = new Gauge({
    name: 'pgqueue_backoff_until_seconds',
    help: 'Deprecated, renamed pgqueue_cooldown_until_seconds (the same values); goes in the next release',
    labelNames: ['scope', 'name', 'partition'],
    registers: [registry],
    collect,
  });
  const running = new Gauge({ name: 'pgqueue_limiter_running', help: "A named limiter's running tasks, over all of its queues and instances", labelNames: ['limiter'], registers: [registry], collect });
  const starts = new Gauge({ name: 'pgqueue_limiter_window_starts', help: "Tasks started inside a named limiter's rate window (0 without a rate limit)", labelNames: ['limiter'], registers: [registry], collect });

  async function read(): Promise<void> {
    const options = source();
    repos ??= { cooldowns: new BackOffRepository(options.schema), limiters: new LimiterRepository(options.schema, options.limiters) };
    const [cooldowns, budgets] = await Promise.all([repos.cooldowns.list(options.prisma), repos.limiters.budgets(options.prisma)]);
    until.reset();
    untilDeprecated.reset();
    for (const b of cooldowns) {
      for (const g of [until, untilDeprecated]) g.set({ scope: b.scope, name: b.name, partition: b.partition ?? '' }, b.until.getTime() / 1000);
    }
    running.reset();
    starts.reset();
    for (const b of budgets) {
      running.set({ limiter: b.name }, b.running);
      starts.set({ limiter: b.name }, b.windowCount);
    }
  }
}
