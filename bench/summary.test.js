// `node --test bench/`: the summary, the chart and the rebuild from saved results, without a
// database (jest's testMatch covers libs/, test/ and src/ only, and the bench is plain CommonJS).
'use strict';

const test = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { summaryMarkdown } = require('./summary');
const { summarySvg } = require('./chart');
const { replaceBlock, publish } = require('./publish');
const saved = require('./results');

const stat = (median) => ({ n: 3, runs: 3, min: median, median, max: median });
const run = (id, extra = {}) => ({ id, date: id.slice(0, 10), command: `cmd ${id}`, quick: false, reps: 3, minutes: 1, lines: ['- machine: test'], savedAt: id, ...extra });
const v = (libKey, group, stats, label = libKey) => ({ key: `${libKey}@10/${group}`, lib: libKey.startsWith('pg-queue') ? 'pg-queue' : libKey, libKey, group, label, stats });

const enqueue = {
  scenario: 'enqueue', num: 1, title: 'Enqueue', run: run('2026-11-20T10:00:00.000Z'), settings: {}, results: [], markdown: '### 1. Enqueue\n\nold enqueue table',
  variants: [v('pg-queue-transactional', '', { tasksPerSec: stat(700) }, 'pg-queue'), v('graphile-worker', '', { tasksPerSec: stat(350) })],
};
const drain = {
  scenario: 'drain', num: 3, title: 'Drain', run: run('2026-11-25T10:00:00.000Z', { quick: true, note: '**Disturbed by a grep.** More text.' }), settings: {}, results: [], markdown: '### 3. Drain\n\nnew drain table',
  variants: [
    v('pg-queue-transactional', 'c=10', { tasksPerSec: stat(9000) }),
    v('pg-queue-lease', 'c=10', { tasksPerSec: stat(11000) }),
    v('graphile-worker', 'c=10', { tasksPerSec: stat(14000) }),
    v('bullmq-production', 'c=10', { tasksPerSec: stat(284) }, 'bullmq-pg <fast>'),
  ],
};

test('each summary row names the run it comes from; missing scenarios say so', () => {
  const records = [enqueue, drain];
  const md = summaryMarkdown(records, saved.runsOf(records), { image: 'bench/results/summary.svg' });
  const row = (label) => md.split('\n').find((l) => l.startsWith(`| ${label}`));
  // Enqueueing has one pg-queue row, shown in both modes' columns; the best value is bold.
  assert.match(row('enqueue one at a time'), /\| \*\*700\*\* \| \*\*700\*\* \| not in this run \| not in this run \| 350 \| A \|$/);
  assert.match(row('drain, tasks/s (concurrency 10)'), /\| 9,000 \| 11,000 \| 284 \| not in this run \| \*\*14,000\*\* \| B \(QUICK\) \|$/);
  assert.match(row('wake-up p50'), /not measured yet .*\| — \|$/);
  assert.match(md, /- \*\*A\*\*: 2026-11-20, `cmd 2026-11-20T10:00:00.000Z`/);
  assert.match(md, /- \*\*B \(QUICK\)\*\*: 2026-11-25, .*Disturbed by a grep \(\[its note\]\(BENCHMARKS.md#results\)\)/);
  assert.match(md, /Not measured yet: bulk, latency, idle/);
  assert.match(md, /!\[.*\]\(bench\/results\/summary.svg\)/);
});

test('the chart draws bars in proportion, with escaped text', () => {
  const svg = summarySvg([drain], saved.runsOf([drain]));
  const width = (label) => Number(svg.match(new RegExp(`>${label}</text>\\s*<rect x="[\\d.]+" y="\\d+" width="([\\d.]+)"`))[1]);
  assert.ok(Math.abs(width('pg-queue \\(lease\\)') / width('graphile-worker') - 11000 / 14000) < 0.01);
  assert.doesNotMatch(svg, /<fast>/);
  assert.match(svg, /not measured yet/); // no wake-up record
  assert.match(svg, /drain from run A \(2026-11-25, QUICK, see its note\)/);
});

test('a block between markers is replaced; unbalanced markers are refused', () => {
  const m = ['<!-- s -->', '<!-- e -->'];
  assert.strictEqual(replaceBlock('a\n<!-- s -->\nold\n<!-- e -->\nb', m, 'new', () => 'unused'), 'a\n<!-- s -->\nnew\n<!-- e -->\nb');
  assert.throws(() => replaceBlock('a <!-- s --> b', m, 'new', () => ''), /unbalanced/);
});

test('a rebuild keeps the sections of scenarios that did not run and adds the one that did', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgqueue-bench-summary-'));
  try {
    const paths = saved.outPaths({ BENCH_OUT_DIR: dir });
    fs.writeFileSync(paths.benchmarks, '# Benchmarks\n\nintro\n\n## Results\n\n<!-- bench:results:start -->\nold\n<!-- bench:results:end -->\n');
    fs.writeFileSync(paths.readme, '# App\n\n## Performance\n\ntext\n');
    saved.save(paths.results, enqueue);
    saved.save(paths.results, { ...drain, run: run('2026-11-21T10:00:00.000Z'), markdown: '### 3. Drain\n\nold drain table' });
    publish(paths);
    assert.match(fs.readFileSync(paths.benchmarks, 'utf8'), /old drain table/);
    // A later run of the drain alone replaces its file only.
    saved.save(paths.results, drain);
    publish(paths);
    const md = fs.readFileSync(paths.benchmarks, 'utf8');
    assert.match(md, /^# Benchmarks\n\n<!-- bench:summary:start -->\n\| {2}\|/);
    assert.doesNotMatch(md, /old drain table|2026-11-21/);
    assert.match(md, /### 1\. Enqueue\n\nFrom run A \(2026-11-20\)\.\n\nold enqueue table/);
    assert.match(md, /### 3\. Drain\n\nFrom run B \(2026-11-25\)\.\n\nnew drain table/);
    assert.doesNotMatch(md, /\nold\n/);
    assert.match(fs.readFileSync(paths.readme, 'utf8'), /## Performance\n\n<!-- bench:summary:start -->[\s\S]*<!-- bench:summary:end -->\n\ntext/);
    assert.match(fs.readFileSync(paths.svg, 'utf8'), /^<svg /);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a run keeps its letter when runs before it are replaced; a new run takes the next one', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgqueue-bench-letters-'));
  try {
    const lettered = (record, id) => ({ ...record, run: { ...run(id), letter: saved.nextLetter(dir, id) } });
    saved.save(dir, lettered(enqueue, '2026-11-20T10:00:00.000Z'));
    saved.save(dir, lettered(drain, '2026-11-21T10:00:00.000Z'));
    assert.deepStrictEqual(saved.runsOf(saved.loadAll(dir)).map((r) => r.letter), ['A', 'B']);
    // Enqueue again: its file (run A's only one) is replaced; B stays B, the new run is C.
    saved.save(dir, lettered(enqueue, '2026-11-25T10:00:00.000Z'));
    assert.deepStrictEqual(saved.runsOf(saved.loadAll(dir)).map((r) => [r.date, r.letter]), [['2026-11-21', 'B'], ['2026-11-25', 'C']]);
    // A run that saved one scenario keeps its letter for the next one.
    assert.strictEqual(saved.nextLetter(dir, '2026-11-25T10:00:00.000Z'), 'C');
    // Files saved without letters take the ones after the last given (A may be a replaced run's); after Z comes AA.
    const legacy = saved.runsOf([{ ...enqueue, run: run('2026-11-19T10:00:00.000Z') }, { ...drain, run: { ...run('2026-11-26T10:00:00.000Z'), letter: 'C' } }]);
    assert.deepStrictEqual(legacy.map((r) => r.letter), ['D', 'C']);
    saved.save(dir, { ...drain, run: { ...run('2026-11-26T10:00:00.000Z'), letter: 'Z' } });
    assert.strictEqual(saved.nextLetter(dir, '2026-11-27T10:00:00.000Z'), 'AA');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
