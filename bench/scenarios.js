// The scenarios of `npm run bench`: each one's rows (variants), sizes, metrics and bounds, and the
// comparison tables some add below their own (history ÷ empty, scale growth, drain ÷ physical limit).
'use strict';

const os = require('node:os');
const report = require('./report');
const { env, QUICK, SIZES, LIB_SET, ALL_LIBS, ROW_LIBS, positiveInt, selected } = require('./config');
const { processesScenario } = require('./scenario-processes');
const { workflowsScenario } = require('./scenario-workflows');

// Variants: what one table row measures.

function variant(libKey, concurrency, group = '') {
  const [lib, mode] = libKey.startsWith('pg-queue') ? ['pg-queue', libKey.slice('pg-queue-'.length)] : [libKey, undefined];
  const key = `${libKey}@${concurrency}${group ? `/${group}` : ''}`;
  if (libKey.startsWith('bullmq-')) {
    const preset = libKey.slice('bullmq-'.length);
    return { key, lib: 'bullmq', preset, libKey, concurrency, group, label: preset === 'defaults' ? 'bullmq-pg (defaults: finished jobs kept)' : 'bullmq-pg' };
  }
  const label = lib === 'pg-queue' ? `pg-queue (${mode})` : lib;
  return { key, lib, mode, libKey, concurrency, group, label };
}

/** Enqueueing does not depend on the handler mode: one pg-queue row. */
function enqueueVariants() {
  const out = [];
  if (LIB_SET.some((l) => l.startsWith('pg-queue'))) {
    const v = variant(LIB_SET.find((l) => l.startsWith('pg-queue')), 10);
    out.push({ ...v, label: 'pg-queue' });
  }
  for (const l of ROW_LIBS) if (!l.startsWith('pg-queue')) out.push(variant(l, 10));
  return out;
}

/**
 * Scenario 8 measures pg-queue's own statements (the handler mode does not matter), one row per
 * template: no tasks, and N/10 or N archived plus as many delayed tasks, and 10 N archived (the
 * time-partitioned archive at scale, issue 15) with N delayed. Against the empty table some
 * operations do less work (no queue to probe, no row to return); N ÷ N/10 isolates growth.
 */
const SCALE_ROWS = {
  empty: { archived: 0, delayed: 0 },
  tenth: { archived: SIZES.history / 10, delayed: SIZES.history / 10 },
  full: { archived: SIZES.history, delayed: SIZES.history },
  archive10x: { archived: SIZES.history * 10, delayed: SIZES.history },
};
function scaleVariants() {
  const libKey = LIB_SET.find((l) => l.startsWith('pg-queue'));
  return libKey ? Object.keys(SCALE_ROWS).map((g) => ({ ...variant(libKey, 10, g), label: 'pg-queue' })) : [];
}

/** Scenario 8's operations (bench/src/scale.ts), in the order they run. */
const SCALE_OPS = [
  ['scrape', 'metrics scrape: `QueueMetrics.metrics()`'],
  ['idleClaim', "the worker's claim, nothing due (batch 100)"],
  ['list', '`list({ queue, limit: 100 })`'],
  ['get', '`get(id)` of an archived task'],
  ['claim', "the worker's claim of 100 due tasks"],
];

/** Scenario 9's rows (bench/src/flow.ts): pg-queue in lease mode, concurrency 50, one row per rule. */
const FLOW_VARIANTS = [
  ['plain', 'drain, no rule'],
  ['global20', 'drain, globalConcurrency 20'],
  ['partitions100', 'drain, 100 partitions, partitionConcurrency 1'],
  ['rate5000', 'drain, rateLimit 5 000 / s'],
  ['fifo', "tenant B's wait behind A's backlog, no partitions"],
  ['fair', "tenant B's wait behind A's backlog, partitions taking turns"],
  ['partitions1000', 'drain, 1 000 partitions, partitionConcurrency 1'],
  ['weighted1000', 'drain, 1 000 partitions weighing 1 to 4, partitionConcurrency 1'],
  ['aging', 'drain, priorities 0 to 4, priorityAgingMs 1 000'],
  ['backoff', 'drain after a 1 s downstream outage (429, RateLimitedError scope queue)'],
  ['bare-global20', 'drain, globalConcurrency 20, the same claim and completion with no library'],
  ['bare-partitions100', 'drain, 100 partitions, partitionConcurrency 1, with no library'],
];
// BENCH_FLOW=plain,global20: only these rows (to compare one rule with the plain drain).
const FLOW_ROWS = selected('scenario 9 row', 'BENCH_FLOW', FLOW_VARIANTS.map(([group]) => group), {});
function flowVariants() {
  if (!LIB_SET.includes('pg-queue-lease')) return [];
  return FLOW_VARIANTS.filter(([group]) => FLOW_ROWS.includes(group)).map(([group, what]) => ({
    ...variant('pg-queue-lease', 50, group),
    label: group.startsWith('bare-') ? `bare pg (pg-queue SQL): ${what}` : `pg-queue (lease): ${what}`,
  }));
}

/** Scenario 4's bare-pg rows: pg-queue's wake-up path for each selected mode, without the library. */
function bareWakeUpVariants() {
  return ['transactional', 'lease']
    .filter((mode) => LIB_SET.includes(`pg-queue-${mode}`))
    .map((mode) => ({ key: `bare-pg-${mode}@10`, lib: 'bare-pg', libKey: `bare-pg-${mode}`, mode, concurrency: 10, group: '', label: `bare pg, ${mode} path (pg-queue SQL, no library)` }));
}

/** A drain's rate, as the drain (3) and flow (9) scenarios measure it. */
const DRAIN_RATE = { key: 'tasksPerSec', label: 'tasks/s (worker start → database shows every task finished)', unit: 'tasks/s', better: 'higher' };

const SCENARIOS = {
  enqueue: {
    num: 1,
    title: `Enqueue one at a time: ${SIZES.enqueue.toLocaleString('en-US')} tasks, sequential awaits`,
    variants: enqueueVariants,
    n: SIZES.enqueue,
    timeoutMs: 240_000,
    metrics: [
      { key: 'tasksPerSec', label: 'tasks/s', better: 'higher' },
      { key: 'msPerCall', label: 'ms per enqueue call', better: 'lower' },
      { key: 'callP50', label: 'call time p50, ms', better: 'lower' },
      { key: 'callP99', label: 'call time p99, ms', better: 'lower' },
    ],
  },
  bulk: {
    num: 2,
    title: `Bulk enqueue: ${SIZES.bulk.toLocaleString('en-US')} tasks in calls of ${SIZES.bulkSize.toLocaleString('en-US')}`,
    variants: enqueueVariants,
    n: SIZES.bulk,
    timeoutMs: 240_000,
    metrics: [
      { key: 'tasksPerSec', label: 'tasks/s', better: 'higher' },
      { key: 'msPerCall', label: `ms per call of ${SIZES.bulkSize}`, better: 'lower' },
    ],
  },
  drain: {
    num: 3,
    title: `Drain ${SIZES.drain.toLocaleString('en-US')} pre-inserted no-op tasks`,
    variants: () => [10, 50].flatMap((c) => LIB_SET.map((l) => variant(l, c, `c=${c}`))),
    n: SIZES.drain,
    timeoutMs: 240_000,
    metrics: [
      DRAIN_RATE,
      { key: 'stmtsPerTask', label: 'statements per task (pg_stat_statements, all statements in the database)', better: 'lower' },
      { key: 'claimUsPerTask', label: 'claim statement execution time per task, µs (pg_stat_statements)', better: 'lower' },
    ],
  },
  latency: {
    num: 4,
    title: `Wake-up latency: idle worker, ${SIZES.latency} tasks enqueued ${SIZES.latencyGapMs} ms apart, enqueue call → handler start`,
    // With pg-queue, also its "physical limit" here: the same statements on bare pg clients.
    variants: () => [...ROW_LIBS.map((l) => variant(l, 10)), ...bareWakeUpVariants()],
    n: SIZES.latency,
    timeoutMs: 60_000,
    metrics: ['p50', 'p95', 'p99', 'max'].map((p) => ({ key: p, label: `${p}, ms`, unit: `ms ${p}`, better: 'lower' })),
  },
  idle: {
    num: 5,
    title: `Idle cost: statements per second of a started, idle worker over ${SIZES.idleMs / 1000} s (pg_stat_statements)`,
    variants: () => ROW_LIBS.map((l) => variant(l, 10)),
    n: 0,
    timeoutMs: SIZES.idleMs + 60_000,
    metrics: [{ key: 'stmtsPerSec', label: 'statements/s', unit: 'statements/s', better: 'lower' }],
  },
  history: {
    num: 6,
    title: `Claim cost with history: drain ${SIZES.historyDrain.toLocaleString('en-US')} at concurrency 10 after ${SIZES.history.toLocaleString('en-US')} finished tasks`,
    variants: () => ['empty', 'history'].flatMap((g) => LIB_SET.map((l) => variant(l, 10, g))),
    template: { scenario: 'make-history', rows: (group) => (group === 'history' ? SIZES.history : 0), what: 'finished tasks' },
    after: historyComparison,
    n: SIZES.historyDrain,
    timeoutMs: 300_000,
    metrics: [
      { key: 'tasksPerSec', label: 'tasks/s', better: 'higher' },
      { key: 'claimUsPerTask', label: 'claim statement execution time per task, µs', better: 'lower' },
      { key: 'claimMsPerCall', label: 'claim statement execution time per call, ms', better: 'lower' },
    ],
  },
  limit: {
    num: 7,
    title: `"Physical limit": bare pg loops, batched claim + batched complete with pg-queue's SQL, concurrency 10, ${SIZES.limit.toLocaleString('en-US')} tasks`,
    variants: () => [
      { key: 'bare-pg-lease@10', lib: 'bare-pg', libKey: 'bare-pg-lease', mode: 'lease', concurrency: 10, group: '', label: 'bare pg, lease path: claim → complete (pg-queue SQL, batch 500 = default batchSize)' },
      { key: 'bare-pg-transactional@10', lib: 'bare-pg', libKey: 'bare-pg-transactional', mode: 'transactional', concurrency: 10, group: '', label: 'bare pg, transactional path: claim → BEGIN → lock → complete → COMMIT' },
    ],
    n: SIZES.limit,
    timeoutMs: 180_000,
    after: limitComparison,
    metrics: [{ key: 'tasksPerSec', label: 'tasks/s', better: 'higher' }],
  },
  flow: {
    num: 9,
    title: `Flow control: drains of ${SIZES.flow.toLocaleString('en-US')} tasks under each rule; fairness: tenant B's 10 tasks enqueued 200 ms after tenant A's ${SIZES.flow.toLocaleString('en-US')} (pg-queue, lease, concurrency 50)`,
    variants: flowVariants,
    n: SIZES.flow,
    timeoutMs: 240_000,
    after: flowComparison,
    metrics: [
      DRAIN_RATE,
      { key: 'bWaitP50', label: "tenant B's wait, enqueue → handler start, p50 ms", better: 'lower' },
      { key: 'bWaitMax', label: "tenant B's wait, enqueue → handler start, max ms", better: 'lower' },
      { key: 'claimMsPerCall', label: 'partitioned or aging claim, server ms per call (pg_stat_statements)', better: 'lower' },
      { key: 'bareCycleMs', label: 'bare loop: ms per claim that took tasks (the drain ÷ those claims)', better: 'lower' },
      { key: 'firstServedMs', label: 'back-off: outage end → first served call, ms', better: 'lower' },
      { key: 'fullRateMs', label: 'back-off: outage end → 90 % of the drain rate over 100 ms, ms', better: 'lower' },
      { key: 'rejectedCalls', label: 'back-off: calls that met the 429', better: 'lower' },
    ],
  },
  scale: {
    num: 8,
    title: `Costs that must not grow with history: up to ${(SIZES.history * 10).toLocaleString('en-US')} archived (10 daily partitions) and ${SIZES.history.toLocaleString('en-US')} delayed tasks against none (pg-queue)`,
    variants: scaleVariants,
    template: {
      scenario: 'make-scale',
      rows: (group) => SCALE_ROWS[group].archived,
      delayed: (group) => SCALE_ROWS[group].delayed,
      what: (group) => `archived + ${SCALE_ROWS[group].delayed.toLocaleString('en-US')} delayed tasks`,
    },
    n: SIZES.scaleCalls,
    timeoutMs: 240_000,
    // Rendered as one table (scaleComparison); the first metric is the progress line's.
    table: scaleComparison,
    metrics: SCALE_OPS.flatMap(([op]) =>
      Object.entries({ Ms: 'ms per call', ServerMs: 'server ms per call', Blocks: 'buffers per call', Statements: 'statements per call' }).map(([m, unit]) => ({ key: `${op}${m}`, label: `${op}: ${unit}`, better: 'lower' })),
    ),
  },
  processes: processesScenario({ n: SIZES.processes, libs: LIB_SET, variant, cores: os.cpus().length }),
  workflows: workflowsScenario({ env, quick: QUICK, libs: ALL_LIBS, positiveInt }),
};

/** A template database per library (BullMQ: per row, as what it keeps differs) and history group. */
function templateKey(v) {
  return `${v.lib}${v.preset ? `-${v.preset}` : ''}/${v.group}`;
}

/** Scenario 6: each library's history row against its own empty-history row. */
function historyComparison(plan, results) {
  const rows = [];
  const all = plan.find((s) => s.id === 'history').all;
  for (const v of all.filter((x) => x.group === 'history')) {
    const empty = all.find((d) => d.libKey === v.libKey && d.group === 'empty');
    const cells = [v.label];
    for (const key of ['tasksPerSec', 'claimUsPerTask']) {
      const h = report.summary(results, v, key).median;
      const e = report.summary(results, empty, key).median;
      cells.push(report.fmt(e), report.fmt(h), h !== null && e ? report.ratio(h / e) : 'n/a');
    }
    rows.push(cells);
  }
  return `With history ÷ without (medians; "empty" = the same pipeline with no history rows):\n\n${report.compareTable(
    ['library', 'tasks/s empty', 'tasks/s history', 'history ÷ empty', 'claim µs/task empty', 'claim µs/task history', 'history ÷ empty'],
    rows,
  )}`;
}

/** Scenario 8: per measure, each operation on the three templates and the growth ratios (medians). */
function scaleComparison(plan, results) {
  const all = plan.find((s) => s.id === 'scale').all;
  const groups = Object.keys(SCALE_ROWS).map((g) => all.find((v) => v.group === g));
  const median = (v, key) => report.summary(results, v, key).median;
  const div = (a, b) => (a !== null && b ? report.ratio(a / b) : 'n/a');
  const runs = groups.map((v) => `${report.summary(results, v, 'scrapeMs').n}/${results.filter((r) => r.variantKey === v.key).length}`);
  const k = (n) => n.toLocaleString('en-US');
  const { tenth, full, archive10x: huge } = SCALE_ROWS;
  const head = ['operation', 'no tasks', `${k(tenth.archived)} + ${k(tenth.delayed)}`, `${k(full.archived)} + ${k(full.delayed)}`, `${k(huge.archived)} + ${k(huge.delayed)}`, `${k(full.archived)} ÷ ${k(tenth.archived)}`, `${k(huge.archived)} ÷ ${k(full.archived)}`, `${k(huge.archived)} ÷ no tasks`];
  const table = (m) =>
    report.compareTable(
      head,
      SCALE_OPS.map(([op, label]) => {
        const [e, t, f, h] = groups.map((v) => median(v, `${op}${m}`));
        return [label, ...[e, t, f, h].map(report.fmt), div(f, t), div(h, f), div(h, e)];
      }),
    );
  return [
    `Columns: the template (archived + delayed tasks of the queue); each cell the median over the repetitions (runs: ${runs.join(', ')}) of a run's figure over its ${SIZES.scaleCalls} calls. The ratios divide a larger template's figure by a smaller one's: flat ≈ 1.0×; a cost that grows with the tasks shows about 10×.`,
    `Wall time per call through the library, ms (median of the run's calls; Prisma and the round trip included):\n\n${table('Ms')}`,
    `Server execution time per call, ms (pg_stat_statements, all statements of the call):\n\n${table('ServerMs')}`,
    `Shared buffers hit or read per call (pg_stat_statements):\n\n${table('Blocks')}`,
  ].join('\n\n');
}

/**
 * Scenario 9's drains against its plain drain (issue 25 asks each rule for 0.6× of it), and the
 * slot-holding rules' drains against their bound (the bare rows of the same rule).
 */
function flowComparison(plan, results) {
  const rows = plan.find((s) => s.id === 'flow').all;
  const median = (v, key) => (v ? report.summary(results, v, key).median : null);
  const plain = rows.find((v) => v.group === 'plain');
  const base = median(plain, 'tasksPerSec');
  if (!base) return 'Each drain ÷ the plain drain: run with the `plain` row (and it must succeed) to compare.';
  const drains = rows.filter((v) => v !== plain && !['fifo', 'fair', 'backoff', 'rate5000'].includes(v.group));
  const line = (v) => {
    const rate = median(v, 'tasksPerSec');
    const bound = median(rows.find((b) => b.group === `bare-${v.group}`), 'tasksPerSec');
    const cycle = median(v, 'bareCycleMs');
    return [
      v.label,
      rate === null ? 'n/a (no run succeeded)' : report.fmt(rate),
      rate === null ? 'n/a' : report.ratio(rate / base),
      rate !== null && bound ? report.ratio(rate / bound) : '',
      cycle === null ? '' : `${report.fmt(cycle)} ms, ${report.fmt((rate * cycle) / 1000)} tasks`,
    ];
  };
  const table = report.compareTable(['drain', 'tasks/s (median)', '÷ plain drain', '÷ its bare bound', 'bare loop: per claim'], drains.map(line));
  return `The drains against the plain drain of the same run (${report.fmt(base)} tasks/s):\n\n${table}`;
}

/** Scenario 7 against the drains at concurrency 10 (scenario 3). */
function limitComparison(plan, results) {
  const limitOf = (mode) => {
    const v = plan.find((s) => s.id === 'limit').all.find((x) => x.mode === mode);
    return report.summary(results, v, 'tasksPerSec').median;
  };
  const lease = limitOf('lease');
  const transactional = limitOf('transactional');
  const drain = plan.find((s) => s.id === 'drain');
  if (!drain) return 'pg-queue ÷ physical limit: run together with the drain scenario (3) to compare.';
  const rows = [];
  const div = (x, l) => (x !== null && l ? report.ratio(x / l) : 'n/a');
  for (const v of drain.all.filter((d) => d.concurrency === 10)) {
    const x = report.summary(results, v, 'tasksPerSec').median;
    rows.push([v.label, report.fmt(x), div(x, lease), div(x, transactional)]);
  }
  // What the targets ask of pg-queue, asked of the bare loops: could any library reach them here?
  const peers = drain.all.filter((d) => d.concurrency === 10 && report.PEERS.has(d.lib));
  const best = Math.max(...peers.map((v) => report.summary(results, v, 'tasksPerSec').median ?? 0));
  const bounds = best > 0 ? `\n\nThe bare loops ÷ the best peer's drain at c=10: lease path ${div(lease, best)}, transactional path ${div(transactional, best)}.` : '';
  return `Drain at concurrency 10 (scenario 3, medians) against these limits:\n\n${report.compareTable(['library', 'tasks/s', '÷ lease-path limit', '÷ transactional-path limit'], rows)}${bounds}`;
}

module.exports = { SCENARIOS, templateKey };
