// Scenario 11 for bench/run.js: durable workflows, pg-queue's @Workflow beside DBOS Transact. The
// variants and the tables; the run itself is bench/src/workflows.ts.
//
//   BENCH_WF_SIZE=5000          workflows in the drain (default 5 000; 500 with BENCH_QUICK)
//   BENCH_WF_SLEEPERS=1000      sleeping workflows in the wake-up (default 1 000; 200 with BENCH_QUICK)
//   BENCH_WF_LEAD_MS=3000       ms from the first start to the instant they all sleep until
//   BENCH_WF_CONCURRENCY=50     workflows running at once per library (pg-queue's queue
//                               concurrency, DBOS's workerConcurrency)
//   BENCH_DBOS_POLL_MS=50       the tuned DBOS row's queue minPollingIntervalMs (the other row
//                               keeps DBOS's default, 1 000 ms)
'use strict';

const report = require('./report');

function workflowsScenario({ env, quick, libs, positiveInt }) {
  const n = positiveInt('BENCH_WF_SIZE', env.BENCH_WF_SIZE ?? (quick ? '500' : '5000'));
  const sleepers = positiveInt('BENCH_WF_SLEEPERS', env.BENCH_WF_SLEEPERS ?? (quick ? '200' : '1000'));
  const leadMs = positiveInt('BENCH_WF_LEAD_MS', env.BENCH_WF_LEAD_MS ?? '3000');
  const concurrency = positiveInt('BENCH_WF_CONCURRENCY', env.BENCH_WF_CONCURRENCY ?? '50');
  const pollMs = positiveInt('BENCH_DBOS_POLL_MS', env.BENCH_DBOS_POLL_MS ?? '50');
  const k = (x) => x.toLocaleString('en-US');
  const row = (lib, group, extra) => ({ key: `${lib}@${concurrency}/${group}${extra.pollMs ? `-poll${extra.pollMs}` : ''}`, lib, libKey: lib, mode: lib === 'pg-queue' ? 'lease' : undefined, concurrency, group, leadMs, ...extra });
  const variants = () => {
    const out = [];
    const pgq = libs.some((l) => l.startsWith('pg-queue'));
    const dbos = libs.includes('dbos');
    for (const group of ['drain', 'wakeup']) {
      const size = group === 'drain' ? n : sleepers;
      if (pgq) out.push(row('pg-queue', group, { n: size, label: 'pg-queue (@Workflow)' }));
      if (dbos) out.push(row('dbos', group, { n: size, label: group === 'drain' ? 'DBOS Transact (queue poll 1 000 ms, its default)' : 'DBOS Transact' }));
      if (dbos && group === 'drain') out.push(row('dbos', group, { n: size, pollMs, label: `DBOS Transact (queue minPollingIntervalMs ${pollMs})` }));
    }
    return out;
  };
  const drainMetrics = [
    { key: 'workflowsPerSec', label: 'workflows/s (first start call → database shows every workflow finished)', unit: 'workflows/s', better: 'higher' },
    { key: 'stepsPerSec', label: 'steps/s (3 per workflow)', better: 'higher' },
    { key: 'enqueueMs', label: 'ms to start them all (one call per workflow, 10 in flight, workers running)', better: 'lower' },
    { key: 'stmtsPerWorkflow', label: 'statements per workflow (pg_stat_statements, all statements in the database)', better: 'lower' },
    { key: 'serverMsPerWorkflow', label: 'server execution time per workflow, ms (pg_stat_statements)', better: 'lower' },
  ];
  const wakeMetrics = [
    ...['p50', 'p95', 'max'].map((p) => ({ key: p, label: `wake-up delay ${p}, ms (the instant → the workflow's code after its sleep runs)`, better: 'lower' })),
    { key: 'slackMs', label: 'ms between the last workflow asleep (pg-queue: parked in the database) and the instant (a check, not a score)', better: 'higher' },
  ];
  return {
    num: 11,
    title: `Durable workflows beside DBOS Transact: ${k(n)} workflows of 3 steps (one a database transaction), and the wake-up of ${k(sleepers)} workflows sleeping until the same instant (concurrency ${concurrency})`,
    variants,
    n,
    timeoutMs: 600_000,
    // The first metric is the progress line's (drain rows; wake-up rows show n/a there).
    metrics: [...drainMetrics, ...wakeMetrics],
    table: (plan, results) => {
      const all = plan.find((s) => s.id === 'workflows').all;
      const drain = all.filter((v) => v.group === 'drain');
      const wake = all.filter((v) => v.group === 'wakeup');
      const out = [
        `Drain: ${k(n)} workflows, each a step, a transaction step inserting one ledger row (checked: exactly ${k(n)} rows), a step; started while the workers run. Wake-up: ${k(sleepers)} workflows started ${k(leadMs)} ms before one instant, each sleeping until it; delay = when its code after the sleep first runs − the instant.`,
      ];
      for (const m of drainMetrics) out.push(`${m.label} (${m.better} is better)\n\n${report.metricTable(results, drain, m)}`);
      for (const m of wakeMetrics) out.push(`${m.label} (${m.better} is better)\n\n${report.metricTable(results, wake, m)}`);
      // Where a drain's statements go: the most called ones of each row's first successful run.
      const top = drain
        .map((v) => ({ v, r: results.find((r) => r.variantKey === v.key && r.ok && r.notes?.length) }))
        .filter((x) => x.r)
        .map(({ v, r }) => `- ${v.label}:\n${r.notes.map((q) => `  - \`${q.replace(/`/g, "'")}\``).join('\n')}`);
      if (top.length) out.push(`Most called statements of a drain (first successful run, by calls; constants normalised by pg_stat_statements):\n\n${top.join('\n')}`);
      return out.join('\n\n');
    },
  };
}

module.exports = { workflowsScenario };
