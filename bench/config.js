// What `npm run bench` runs, read from the environment (the variables: bench/run.js's header and
// BENCHMARKS.md): repetitions, sizes, scenarios and libraries.
'use strict';

const env = process.env;
const QUICK = env.BENCH_QUICK === '1' || env.BENCH_QUICK === 'true';
const REPS = positiveInt('BENCH_REPS', env.BENCH_REPS ?? (QUICK ? '1' : '3'));
const WRITE = env.BENCH_WRITE === '1' || env.BENCH_WRITE === 'true';

const SIZES = QUICK
  ? { enqueue: 500, bulk: 10_000, bulkSize: 1000, drain: 2_000, latency: 50, latencyGapMs: 20, idleMs: 5_000, history: 50_000, historyDrain: 2_000, limit: 2_000, scaleCalls: 50, flow: 2_000, processes: 5_000 }
  : { enqueue: 5_000, bulk: 100_000, bulkSize: 1000, drain: 20_000, latency: 200, latencyGapMs: 20, idleMs: 20_000, history: 1_000_000, historyDrain: 20_000, limit: 20_000, scaleCalls: 200, flow: 10_000, processes: 100_000 };

// BENCH_SIZES=drain=5000,enqueue=1000: counts for a slow or shared machine (printed with the command).
for (const part of (env.BENCH_SIZES ?? '').split(',').filter(Boolean)) {
  const [name, value] = part.split('=').map((x) => x.trim());
  if (!(name in SIZES)) {
    console.error(`BENCH_SIZES: unknown size "${name}" (known: ${Object.keys(SIZES).join(', ')})`);
    process.exit(2);
  }
  SIZES[name] = positiveInt(`BENCH_SIZES ${name}`, value);
}

const LIBS = ['pg-queue-transactional', 'pg-queue-lease', 'pg-boss', 'graphile-worker', 'bullmq-production', 'bullmq-defaults'];
const SCENARIO_IDS = ['enqueue', 'bulk', 'drain', 'latency', 'idle', 'history', 'limit', 'scale', 'flow', 'processes', 'workflows'];

function positiveInt(name, value) {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) {
    console.error(`${name} must be a positive integer, got ${JSON.stringify(value)}`);
    process.exit(2);
  }
  return n;
}

function selected(list, envName, all, aliases) {
  if (!env[envName]) return all;
  const out = new Set();
  for (const raw of env[envName].split(',').map((s) => s.trim().toLowerCase()).filter(Boolean)) {
    const names = aliases[raw] ?? (all.includes(raw) ? [raw] : null);
    if (!names) {
      console.error(`${envName}: unknown ${list} "${raw}" (known: ${[...new Set([...all, ...Object.keys(aliases)])].join(', ')})`);
      process.exit(2);
    }
    names.forEach((n) => out.add(n));
  }
  return all.filter((x) => out.has(x));
}

const ONLY = selected('scenario', 'BENCH_ONLY', SCENARIO_IDS, {
  1: ['enqueue'], 2: ['bulk'], 3: ['drain'], 4: ['latency'], 5: ['idle'], 6: ['history'], 7: ['limit'], 8: ['scale'], 9: ['flow'], 10: ['processes'], 11: ['workflows'],
  wf: ['workflows'],
  wakeup: ['latency'], 'physical-limit': ['limit'], physical: ['limit'],
});
// DBOS Transact runs workflows only (scenario 11): selectable, never among the task queues' rows.
const ALL_LIBS = selected('library', 'BENCH_LIBS', [...LIBS, 'dbos'], {
  'pg-queue': ['pg-queue-transactional', 'pg-queue-lease'],
  pgqueue: ['pg-queue-transactional', 'pg-queue-lease'],
  'pg-queue-tx': ['pg-queue-transactional'],
  pgboss: ['pg-boss'],
  graphile: ['graphile-worker'],
  bullmq: ['bullmq-production', 'bullmq-defaults'],
  'bullmq-pg': ['bullmq-production', 'bullmq-defaults'],
  'dbos-sdk': ['dbos'],
});
const LIB_SET = ALL_LIBS.filter((l) => l !== 'dbos');
// BullMQ's defaults differ from its production settings only in what it keeps of finished jobs: a
// second row where finished jobs matter (drain, history), not where none finish (enqueue, idle) or
// only the handler's start is timed (wake-up).
const ROW_LIBS = LIB_SET.filter((l) => l !== 'bullmq-defaults' || !LIB_SET.includes('bullmq-production'));

module.exports = { selected, env, QUICK, REPS, WRITE, SIZES, ONLY, ALL_LIBS, LIB_SET, ROW_LIBS, positiveInt };
