// Saved results: one JSON file per scenario (bench/results/<scenario>.json), holding the run it came
// from (date, command, machine, load), its rows' min / median / max per metric, the raw per-run
// figures and the section's markdown as rendered when it ran (titles and tables depend on that
// run's sizes). A later subset run replaces only its own scenarios' files, and the summary, the
// chart and the results section of BENCHMARKS.md are rebuilt from all of them.
'use strict';

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const report = require('./report');

const ROOT = path.resolve(__dirname, '..');

/**
 * Where BENCH_WRITE writes: BENCHMARKS.md, README.md and bench/results/ under BENCH_OUT_DIR (a
 * scratch copy, to try the pipeline) or the repository.
 */
function outPaths(env = process.env) {
  const root = env.BENCH_OUT_DIR ? path.resolve(env.BENCH_OUT_DIR) : ROOT;
  const results = path.join(root, 'bench', 'results');
  return { root, results, benchmarks: path.join(root, 'BENCHMARKS.md'), readme: path.join(root, 'README.md'), svg: path.join(results, 'summary.svg') };
}

/** A run without BENCH_WRITE keeps its JSON outside the repository, so a smoke run changes no file. */
function scratchResultsDir(startedAt) {
  return path.join(os.tmpdir(), `pg-queue-bench-results-${new Date(startedAt).toISOString().replace(/[:.]/g, '-')}`);
}

/** The saved form of one scenario of a run (`sc` is a plan entry of bench/run.js). */
function scenarioRecord(sc, results, { run, settingsByLib, markdown }) {
  const mine = results.filter((r) => r.scenario === sc.id);
  const variants = sc.all.map((v) => {
    const stats = {};
    for (const metric of sc.metrics) stats[metric.key] = report.summary(mine, v, metric.key);
    const { key, lib, libKey, mode, preset, concurrency, group, label } = v;
    return { key, lib, libKey, mode, preset, concurrency, group, label, stats };
  });
  const settings = {};
  for (const v of sc.all) if (settingsByLib[v.label]) settings[v.label] = settingsByLib[v.label];
  return { scenario: sc.id, num: sc.num, title: sc.title, run, settings, variants, results: mine, markdown };
}

function save(dir, record) {
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `${record.scenario}.json`);
  fs.writeFileSync(file, `${JSON.stringify(record, null, 1)}\n`);
  return file;
}

/** Every saved scenario in `dir`, in scenario order (the chart's file and anything else skipped). */
function loadAll(dir) {
  if (!fs.existsSync(dir)) return [];
  return fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .map((f) => {
      const record = JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8'));
      if (!record.scenario || !record.run || !Array.isArray(record.variants)) throw new Error(`${path.join(dir, f)}: not a saved bench scenario`);
      return record;
    })
    .sort((a, b) => a.num - b.num);
}

/** The label of the i-th run (0: A): A … Z, then AA, AB, …, as spreadsheet columns. */
function letterAt(i) {
  return (i >= 26 ? letterAt(Math.floor(i / 26) - 1) : '') + String.fromCharCode(65 + (i % 26));
}

const indexOfLetter = (letter) => [...letter].reduce((n, c) => n * 26 + (c.charCodeAt(0) - 64), 0) - 1;

/** The index of the last letter the runs hold (-1: none). */
const lastLetterIndex = (runs) => runs.reduce((max, r) => (r.letter ? Math.max(max, indexOfLetter(r.letter)) : max), -1);

/**
 * The distinct runs behind the saved scenarios, oldest first, each with its letter, the scenarios
 * it supplied and the header lines of its latest saved scenario (load at its end). A run's letter
 * is given once, when its first scenario is saved (nextLetter), and kept, so that text naming
 * "run F" stays true when other runs are replaced; files saved without one get the letters after
 * the last one given, in date order.
 */
function runsOf(records) {
  const byId = new Map();
  for (const r of records) {
    const e = byId.get(r.run.id) ?? { ...r.run, scenarios: [], settings: {} };
    e.scenarios.push(r.scenario);
    Object.assign(e.settings, r.settings);
    if ((r.run.savedAt ?? '') >= (e.savedAt ?? '')) Object.assign(e, { lines: r.run.lines, savedAt: r.run.savedAt, minutes: r.run.minutes });
    byId.set(r.run.id, e);
  }
  const runs = [...byId.values()].sort((a, b) => (a.id < b.id ? -1 : 1));
  // Files saved without a letter come after every letter given (an unused one may be a replaced run's).
  let next = lastLetterIndex(runs) + 1;
  return runs.map((e) => (e.letter ? e : { ...e, letter: letterAt(next++) }));
}

/** The letter of run `id` among the records saved in `dir`: the one it has, else the one after every letter given so far. */
function nextLetter(dir, id) {
  const runs = runsOf(loadAll(dir));
  const mine = runs.find((r) => r.id === id);
  if (mine) return mine.letter;
  return letterAt(lastLetterIndex(runs) + 1);
}

module.exports = { outPaths, scratchResultsDir, scenarioRecord, save, loadAll, runsOf, nextLetter };
