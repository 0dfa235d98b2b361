// `npm run bench`: pg-queue against pg-boss, graphile-worker and BullMQ on PostgreSQL (and a bare `pg` loop on pg-queue's
// SQL), one fresh database per library × scenario × repetition, each run in its own child process
// (bench/child.js). Tables go to stdout, progress to stderr. See BENCHMARKS.md.
//
//   BENCH_REPS=3            repetitions per variant (default 3; 1 with BENCH_QUICK)
//   BENCH_ONLY=drain,idle   scenarios by name or number: enqueue(1) bulk(2) drain(3) latency(4)
//                           idle(5) history(6) limit(7) scale(8, pg-queue only) flow(9, pg-queue lease only)
//                           processes(10, pg-queue only) workflows(11, pg-queue and DBOS Transact,
//                           see bench/scenario-workflows.js for its sizes)
//   BENCH_LIBS=pg-queue,pg-boss   pg-queue (both modes), pg-queue-transactional, pg-queue-lease,
//                           pg-boss, graphile-worker, bullmq (both rows), bullmq-production,
//                           bullmq-defaults, dbos (scenario 11 only)
//   BENCH_QUICK=1           small counts, for smoke tests
//   BENCH_WRITE=1           also write the results into BENCHMARKS.md
//   BENCH_ANALYZE=0         do not ANALYZE after inserting a drain's backlog (default: do, as
//                           autovacuum would have by then)
//   DATABASE_URL            use this server (needs CREATEDB; pg_stat_statements preloaded for the
//                           statement counts) instead of a throwaway local cluster
'use strict';

const { fork, execFileSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Client } = require('pg');
const { startLocalPostgres } = require('../scripts/local-postgres');
const report = require('./report');
const { processesScenario } = require('./scenario-processes');
const { workflowsScenario } = require('./scenario-workflows');

const ROOT = path.resolve(__dirname, '..');
const env = process.env;
const QUICK = env.BENCH_QUICK === '1' || env.BENCH_QUICK === 'true';
const REPS = positiveInt('BENCH_REPS', env.BENCH_REPS ?? (QUICK ? '1' : '3'));
const WRITE = env.BENCH_WRITE === '1' || env.BENCH_WRITE === 'true';

const SIZES = QUICK
  ? { enqueue: 500, bulk: 10_000, bulkSize: 1000, drain: 2_000, latency: 50, latencyGapMs: 20, idleMs: 5_000, history: 50_000, historyDrain: 2_000, limit: 2_000, scaleCalls: 50, flow: 2_000, processes: 5_000 }
  : { enqueue: 5_000, bulk: 100_000, bulkSize: 1000, drain: 20_000, latency: 200, latencyGapMs: 20, idleMs: 20_000, history: 1_000_000, historyDrain: 20_000, limit: 20_000, scaleCalls: 200, flow: 10_000, processes: 100_000 };

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

// ---------------------------------------------------------------------------------------------
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
];
function flowVariants() {
  if (!LIB_SET.includes('pg-queue-lease')) return [];
  return FLOW_VARIANTS.map(([group, what]) => ({ ...variant('pg-queue-lease', 50, group), label: `pg-queue (lease): ${what}` }));
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
    metrics: [{ key: 'tasksPerSec', label: 'tasks/s', better: 'higher' }],
  },
  flow: {
    num: 9,
    title: `Flow control: drains of ${SIZES.flow.toLocaleString('en-US')} tasks under each rule; fairness: tenant B's 10 tasks enqueued 200 ms after tenant A's ${SIZES.flow.toLocaleString('en-US')} (pg-queue, lease, concurrency 50)`,
    variants: flowVariants,
    n: SIZES.flow,
    timeoutMs: 240_000,
    metrics: [
      DRAIN_RATE,
      { key: 'bWaitP50', label: "tenant B's wait, enqueue → handler start, p50 ms", better: 'lower' },
      { key: 'bWaitMax', label: "tenant B's wait, enqueue → handler start, max ms", better: 'lower' },
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

// ---------------------------------------------------------------------------------------------
// Database plumbing.

let pg = null; // local cluster, when started here
let adminUrl = env.DATABASE_URL;
let currentChild = null;
const liveDatabases = new Set();

function dbUrl(name) {
  const u = new URL(adminUrl);
  u.pathname = `/${name}`;
  return u.toString();
}

async function sql(text, values) {
  const c = new Client({ connectionString: adminUrl });
  await c.connect();
  try {
    return (await c.query(text, values)).rows;
  } finally {
    await c.end();
  }
}

async function createDatabase(name, template) {
  liveDatabases.add(name);
  await sql(template ? `CREATE DATABASE ${name} TEMPLATE ${template} STRATEGY FILE_COPY` : `CREATE DATABASE ${name}`);
}

async function dropDatabase(name) {
  await sql(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  liveDatabases.delete(name);
}

function dbName(parts) {
  return `bench_${parts.join('_')}_${crypto.randomBytes(3).toString('hex')}`.replace(/[^a-z0-9_]/g, '_').slice(0, 63);
}

/** Runs one child with a hard deadline; resolves with its result (never rejects). */
function runChild(spec, hardMs) {
  return new Promise((resolve) => {
    const child = fork(path.join(__dirname, 'child.js'), [JSON.stringify(spec)], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
    currentChild = child;
    let result = null;
    let output = '';
    const keep = (chunk) => {
      output = (output + chunk).slice(-4000);
      process.stderr.write(chunk.toString().replace(/^/gm, '      | '));
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    child.on('message', (m) => (result = m));
    const timer = setTimeout(() => {
      result = { ok: false, metrics: {}, notes: [], error: `killed after the hard limit of ${Math.round(hardMs / 1000)} s` };
      child.kill('SIGKILL');
    }, hardMs);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      currentChild = null;
      resolve(result ?? { ok: false, metrics: {}, notes: [], error: `child exited (${signal ?? code}) without a result: ${output.trim().split('\n').slice(-3).join(' / ')}` });
    });
  });
}

// ---------------------------------------------------------------------------------------------

function machine(pgVersion, settings) {
  const cpu = (() => {
    try {
      const m = fs.readFileSync('/proc/cpuinfo', 'utf8').match(/^model name\s*:\s*(.+)$/m);
      return m ? m[1].trim() : os.cpus()[0]?.model ?? 'unknown';
    } catch {
      return os.cpus()[0]?.model ?? 'unknown';
    }
  })();
  let nproc = os.cpus().length;
  try {
    nproc = Number(execFileSync('nproc', { encoding: 'utf8' }).trim());
  } catch {
    /* os.cpus() then */
  }
  const version = (pkg) => {
    try {
      return JSON.parse(fs.readFileSync(path.join(ROOT, 'node_modules', pkg, 'package.json'), 'utf8')).version;
    } catch {
      return '?';
    }
  };
  const benchEnv = Object.keys(env)
    .filter((k) => k.startsWith('BENCH_'))
    .sort()
    .map((k) => `${k}=${env[k]}`);
  return {
    cpu,
    nproc,
    memGiB: (os.totalmem() / 2 ** 30).toFixed(1),
    node: process.version,
    postgres: pgVersion,
    settings,
    versions: { 'pg-boss': version('pg-boss'), 'graphile-worker': version('graphile-worker'), bullmq: version('bullmq'), '@dbos-inc/dbos-sdk': version('@dbos-inc/dbos-sdk'), '@dbos-inc/prisma-datasource': version('@dbos-inc/prisma-datasource'), '@prisma/client': version('@prisma/client'), '@prisma/adapter-pg': version('@prisma/adapter-pg'), pg: version('pg'), '@nestjs/core': version('@nestjs/core') },
    command: [...benchEnv, 'npm run bench'].join(' '),
    database: pg ? 'throwaway local cluster started by the bench (scripts/local-postgres.js)' : 'DATABASE_URL',
  };
}

function log(msg) {
  process.stderr.write(`${msg}\n`);
}

let loadBefore = null;

async function main() {
  const startedAt = Date.now();
  loadBefore = os.loadavg();
  if (!adminUrl) {
    pg = await startLocalPostgres({ label: 'bench', settings: { shared_preload_libraries: 'pg_stat_statements' } });
    adminUrl = pg.url;
    log(`database: throwaway local PostgreSQL on 127.0.0.1:${pg.port} (set DATABASE_URL to use your own)`);
  } else {
    log('database: DATABASE_URL');
  }
  const pgVersion = (await sql('SHOW server_version'))[0].server_version;
  const settingNames = ['fsync', 'synchronous_commit', 'full_page_writes', 'wal_level', 'shared_buffers', 'max_wal_size', 'checkpoint_timeout', 'max_connections', 'shared_preload_libraries'];
  const settings = {};
  for (const s of settingNames) settings[s] = (await sql(`SHOW ${s}`))[0][s];
  let statementStats = /(^|[\s,])pg_stat_statements($|[\s,])/.test(settings.shared_preload_libraries);
  try {
    if (statementStats) {
      await sql('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
      await sql('SELECT 1 FROM pg_stat_statements LIMIT 1');
    }
  } catch (err) {
    statementStats = false;
    log(`pg_stat_statements unusable: ${err.message}`);
  }
  if (!statementStats) log('pg_stat_statements is not loaded (shared_preload_libraries): the idle scenario fails and statement counts are n/a');
  const m = machine(pgVersion, settings);
  log(`PostgreSQL ${pgVersion}; durability: fsync=${settings.fsync}, synchronous_commit=${settings.synchronous_commit}, full_page_writes=${settings.full_page_writes} (defaults); shared_buffers=${settings.shared_buffers}`);
  log(`${QUICK ? 'QUICK mode, ' : ''}${REPS} repetition(s); scenarios: ${ONLY.join(', ')}; libraries: ${ALL_LIBS.join(', ')}`);

  // Plan: scenario by scenario; inside, repetition by repetition, every variant once (interleaved,
  // so drift over the run affects every library alike).
  const results = [];
  const settingsByLib = {};
  const notes = {};

  // Variant keys are unique across scenarios: `<scenario>:<library>@<concurrency>[/<group>]`.
  const plan = ONLY.map((id) => ({ id, ...SCENARIOS[id], all: SCENARIOS[id].variants().map((v) => ({ ...v, key: `${id}:${v.key}` })) }));
  const total = plan.reduce((a, s) => a + s.all.length * REPS, 0);
  let done = 0;

  for (const sc of plan) {
    log(`\n== ${sc.num}. ${sc.title}`);
    const templates = {};
    if (sc.template) {
      // Two template databases per library, built the same way (schema installed by the library,
      // history inserted, VACUUM ANALYZE): one with the history, one with none. Each run clones one
      // (CREATE DATABASE … TEMPLATE … STRATEGY FILE_COPY), so every repetition starts from a fresh,
      // identical database and the only difference between the two rows is the history.
      for (const v of sc.all) {
        const tkey = templateKey(v);
        if (tkey in templates) continue;
        templates[tkey] = null;
        const rows = sc.template.rows(v.group);
        const name = dbName(['tpl', v.lib, v.group]);
        await createDatabase(name);
        const t0 = Date.now();
        const res = await runChild(
          { scenario: sc.template.scenario, lib: v.lib, mode: 'transactional', preset: v.preset, concurrency: 10, url: dbUrl(name), adminUrl, dbName: name, n: rows, delayed: sc.template.delayed?.(v.group), timeoutMs: 1_800_000 },
          1_800_000,
        );
        if (!res.ok) {
          log(`   template ${tkey} FAILED: ${res.error}`);
          await dropDatabase(name).catch(() => undefined);
          continue;
        }
        templates[tkey] = name;
        const what = typeof sc.template.what === 'function' ? sc.template.what(v.group) : sc.template.what;
        log(`   template ${tkey}: ${rows.toLocaleString('en-US')} ${what}, built in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      }
    }
    for (let rep = 1; rep <= REPS; rep++) {
      for (const v of sc.all) {
        done++;
        const name = dbName([sc.id.slice(0, 4), v.libKey.replace('pg-queue-', 'pgq_').replace('graphile-worker', 'gw').replace('pg-boss', 'boss'), `c${v.concurrency}`, { empty: 'e', history: 'h', tenth: 't', full: 'f' }[v.group] ?? '', `r${rep}`]);
        const t0 = Date.now();
        let res;
        const template = sc.template ? templates[templateKey(v)] : undefined;
        if (sc.template && !template) {
          res = { ok: false, metrics: {}, notes: [], error: 'no template database' };
        } else {
          try {
            await createDatabase(name, template);
            res = await runChild(
              {
                scenario: sc.id,
                lib: v.lib,
                mode: v.mode,
                preset: v.preset,
                concurrency: v.concurrency,
                url: dbUrl(name),
                adminUrl,
                dbName: name,
                n: v.n ?? sc.n,
                bulkSize: SIZES.bulkSize,
                latencyGapMs: SIZES.latencyGapMs,
                idleMs: SIZES.idleMs,
                group: v.group,
                processes: v.processes,
                pollMs: v.pollMs,
                leadMs: v.leadMs,
                timeoutMs: sc.timeoutMs - 30_000,
              },
              sc.timeoutMs + 30_000,
            );
          } catch (err) {
            res = { ok: false, metrics: {}, notes: [], error: err.message };
          } finally {
            await dropDatabase(name).catch((err) => log(`   could not drop ${name}: ${err.message}`));
          }
        }
        results.push({ scenario: sc.id, variantKey: v.key, rep, ...res });
        if (res.settings) settingsByLib[v.label] = res.settings;
        if (res.ok && res.notes?.length && rep === 1) notes[`${sc.id}/${v.key}`] = res.notes;
        const main = sc.metrics[0];
        const shown = res.ok ? `${report.fmt(res.metrics[main.key])} ${main.unit ?? main.label}` : `FAILED: ${String(res.error).split('\n')[0]}`;
        log(`   [${done}/${total}] ${v.label}${v.group ? ` ${v.group}` : ''} rep ${rep}: ${shown} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
      }
    }
    for (const name of Object.values(templates)) await dropDatabase(name).catch(() => undefined);
  }

  const elapsed = (Date.now() - startedAt) / 1000;
  const md = render(plan, results, settingsByLib, notes, m, statementStats, elapsed);
  process.stdout.write(`\n${md}\n`);
  if (WRITE) {
    writeBenchmarksMd(md);
    log('\nwrote BENCHMARKS.md');
  }
  const failed = results.filter((r) => !r.ok);
  log(`\n${results.length - failed.length}/${results.length} runs succeeded in ${(elapsed / 60).toFixed(1)} min`);
  return failed.length === 0 ? 0 : 1;
}

function render(plan, results, settingsByLib, notes, m, statementStats, elapsed) {
  const out = [];
  out.push(`Run on ${new Date().toISOString().slice(0, 10)}: \`${m.command}\`${QUICK ? ' (QUICK mode: smaller counts, not comparable with a full run)' : ''}; ${REPS} repetition(s) per row, each in a fresh database and a fresh Node process; ${(elapsed / 60).toFixed(1)} min in all.`);
  out.push('');
  out.push(`- machine: ${m.nproc} CPUs (nproc), ${m.cpu}, ${m.memGiB} GiB memory`);
  out.push(`- Node ${m.node}; PostgreSQL ${m.postgres} (${m.database})`);
  out.push(`- PostgreSQL settings: ${Object.entries(m.settings).map(([k, v]) => `${k}=${v}`).join(', ')} — durability at the defaults (fsync, synchronous_commit and full_page_writes on)`);
  out.push(`- versions: ${Object.entries(m.versions).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  const la = (l) => l.map((x) => x.toFixed(2)).join(' / ');
  out.push(`- load average (1/5/15 min) at start ${la(loadBefore)}, at end ${la(os.loadavg())}: anything else running on the machine shows here`);
  if (!statementStats) out.push('- pg_stat_statements was not available: statement counts are n/a');
  out.push('');
  out.push('Settings per library, as run:');
  out.push('');
  for (const [lib, s] of Object.entries(settingsByLib)) out.push(`- ${lib}: \`${s}\``);
  out.push('');
  out.push('Each table: min / median / max over the repetitions (`runs` = successful/attempted); the last column divides pg-queue\'s median by the best peer\'s median (pg-boss, graphile-worker or BullMQ on PostgreSQL, either of its rows) in the same setting. For throughput above 1× means pg-queue is faster; for times and statement counts below 1× means pg-queue is cheaper.');

  for (const sc of plan) {
    const rows = sc.all;
    out.push('');
    out.push(`### ${sc.num}. ${sc.title}`);
    if (sc.table) out.push('', sc.table(plan, results));
    else {
      for (const metric of sc.metrics) {
        out.push('', `${metric.label} (${metric.better} is better)`, '', report.metricTable(results, rows, metric));
      }
    }
    if (sc.id === 'history') out.push('', historyComparison(plan, results));
    if (sc.id === 'limit') out.push('', limitComparison(plan, results));
    if (sc.id === 'idle') {
      const list = rows.filter((v) => notes[`idle/${v.key}`]);
      if (list.length) {
        out.push('', 'Statements behind the idle cost (first repetition, by calls; constants normalised by pg_stat_statements):', '');
        for (const v of list) {
          out.push(`- ${v.label}:`);
          for (const n of notes[`idle/${v.key}`].slice(0, 5)) out.push(`  - \`${n.replace(/`/g, "'")}\``);
        }
      }
    }
    const failed = results.filter((r) => r.scenario === sc.id && !r.ok);
    if (failed.length) {
      out.push('', 'Failed runs:', '');
      for (const f of failed) out.push(`- ${f.variantKey} rep ${f.rep}: ${String(f.error).split('\n')[0]}`);
    }
    const dupes = results.filter((r) => r.scenario === sc.id && r.ok && r.notes?.some((n) => n.includes('duplicate')));
    for (const d of dupes) out.push('', `Note: ${d.variantKey} rep ${d.rep}: ${d.notes.join('; ')}`);
  }
  return out.join('\n');
}

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

const START = '<!-- bench:results:start -->';
const END = '<!-- bench:results:end -->';

function writeBenchmarksMd(md) {
  const file = path.join(ROOT, 'BENCHMARKS.md');
  const block = `${START}\n${md}\n${END}`;
  let text = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : `# Benchmarks\n\n${START}\n${END}\n`;
  if (!text.includes(START) || !text.includes(END)) text += `\n## Results\n\n${START}\n${END}\n`;
  text = text.slice(0, text.indexOf(START)) + block + text.slice(text.indexOf(END) + END.length);
  fs.writeFileSync(file, text);
}

// ---------------------------------------------------------------------------------------------
// Cleanup: whatever happens, no child and no cluster outlive the bench.

let cleaning = false;
async function cleanup() {
  if (cleaning) return;
  cleaning = true;
  if (currentChild) currentChild.kill('SIGKILL');
  if (pg) {
    pg.stop();
    pg = null;
  } else if (adminUrl) {
    for (const name of [...liveDatabases]) await dropDatabase(name).catch(() => undefined);
  }
}

process.on('exit', () => {
  if (currentChild) currentChild.kill('SIGKILL');
  if (pg) pg.stop();
});
for (const [sig, code] of [['SIGINT', 130], ['SIGTERM', 143]]) {
  process.on(sig, () => {
    log(`\n${sig}: cleaning up`);
    const hard = setTimeout(() => process.exit(code), 10_000);
    hard.unref();
    cleanup().finally(() => process.exit(code));
  });
}

main()
  .then(async (code) => {
    await cleanup();
    process.exit(code);
  })
  .catch(async (err) => {
    console.error(err);
    await cleanup();
    process.exit(1);
  });
