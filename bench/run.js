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
//   BENCH_FLOW=plain,global20  scenario 9's rows by name (default: all; names in bench/scenarios.js)
//   BENCH_QUICK=1           small counts, for smoke tests
//   BENCH_SIZES=drain=5000  override counts by name (enqueue, bulk, drain, latency, idleMs, history, …)
//   BENCH_WRITE=1           save each scenario's results in bench/results/<scenario>.json (without
//                           it: a scratch directory, printed) and rebuild from all saved ones the
//                           summary, bench/results/summary.svg and the results in BENCHMARKS.md and
//                           the README (bench/publish.js; `npm run bench:render` does only that)
//   BENCH_OUT_DIR=/tmp/x    write those under /tmp/x (its BENCHMARKS.md, README.md, bench/results/)
//   BENCH_NOTE='…'          a note on this run, printed with it under Results (e.g. "disturbed: …")
//   BENCH_ANALYZE=0         do not ANALYZE after inserting a drain's backlog (default: do, as
//                           autovacuum would have by then)
//   DATABASE_URL            use this server (needs CREATEDB; pg_stat_statements preloaded for the
//                           statement counts) instead of a throwaway local cluster
'use strict';

const os = require('node:os');
const report = require('./report');
const { env, QUICK, REPS, WRITE, SIZES, ONLY, ALL_LIBS } = require('./config');
const { SCENARIOS, templateKey } = require('./scenarios');
const harness = require('./harness');
const saved = require('./results');
const { render, runLines, section } = require('./render');
const { publish } = require('./publish');

const { log, sql, dbUrl, createDatabase, dropDatabase, dbName, runChild, cleanup } = harness;

async function main() {
  const startedAt = Date.now();
  const loadBefore = os.loadavg();
  await harness.startDatabase();
  const adminUrl = harness.adminUrl();
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
  const m = { ...harness.machine(pgVersion, settings), loadBefore };
  log(`PostgreSQL ${pgVersion}; durability: fsync=${settings.fsync}, synchronous_commit=${settings.synchronous_commit}, full_page_writes=${settings.full_page_writes} (defaults); shared_buffers=${settings.shared_buffers}`);
  log(`${QUICK ? 'QUICK mode, ' : ''}${REPS} repetition(s); scenarios: ${ONLY.join(', ')}; libraries: ${ALL_LIBS.join(', ')}`);

  // Plan: scenario by scenario; inside, repetition by repetition, every variant once (interleaved,
  // so drift over the run affects every library alike).
  const results = [];
  const settingsByLib = {};
  const notes = {};
  // Each scenario is saved as soon as it ends, so a run cut short keeps what it measured.
  const resultsDir = WRITE ? saved.outPaths().results : saved.scratchResultsDir(startedAt);
  if (WRITE && env.BENCH_LIBS) log(`BENCH_LIBS with BENCH_WRITE: ${ONLY.join(', ')} will be saved with these libraries' rows only (a scenario's file is replaced whole, so that its ratios come from one run)`);
  const runId = new Date(startedAt).toISOString();
  // Given before this run saves anything (a run it replaces whole does not hand its letter on).
  const letter = saved.nextLetter(resultsDir, runId);
  const runInfo = () => ({
    id: runId,
    letter,
    date: new Date(startedAt).toISOString().slice(0, 10),
    command: m.command,
    quick: QUICK,
    reps: REPS,
    minutes: (Date.now() - startedAt) / 60_000,
    lines: runLines(m, statementStats),
    ...(env.BENCH_NOTE ? { note: env.BENCH_NOTE } : {}),
    savedAt: new Date().toISOString(),
    machine: m,
  });

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
                globalConcurrency: v.globalConcurrency,
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
    // A scenario none of whose runs succeeded leaves the figures saved before in place.
    if (results.some((r) => r.scenario === sc.id && r.ok)) {
      const record = saved.scenarioRecord(sc, results, { run: runInfo(), settingsByLib, markdown: section(sc, plan, results, notes) });
      log(`   saved ${saved.save(resultsDir, record)}`);
    } else log(`   not saved: every run of ${sc.id} failed`);
  }

  const elapsed = (Date.now() - startedAt) / 1000;
  process.stdout.write(`\n${render(plan, results, settingsByLib, notes, runInfo())}\n`);
  if (WRITE) log(`\nrebuilt from ${resultsDir}: ${publish().files.join(', ')}`);
  const failed = results.filter((r) => !r.ok);
  log(`\n${results.length - failed.length}/${results.length} runs succeeded in ${(elapsed / 60).toFixed(1)} min`);
  return failed.length === 0 ? 0 : 1;
}

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

