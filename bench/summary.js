// The comparison a reader takes in at a glance, at the top of BENCHMARKS.md and in the README:
// one table of the headline medians (each row naming the saved run it comes from) and what each
// library guarantees. Pure: saved scenarios in (bench/results.js), markdown out.
'use strict';

const { fmt } = require('./report');

/** The table's columns: pg-queue in both modes and the three peers (BullMQ as its production guide advises). */
const COLUMNS = [
  { libKey: 'pg-queue-transactional', title: 'pg-queue (transactional)' },
  { libKey: 'pg-queue-lease', title: 'pg-queue (lease)' },
  { libKey: 'bullmq-production', title: 'BullMQ-PG' },
  { libKey: 'pg-boss', title: 'pg-boss' },
  { libKey: 'graphile-worker', title: 'graphile-worker' },
];

/** Measured rows: scenario, metric and row group (the drain's concurrency). */
const MEASURES = [
  { label: 'enqueue one at a time, tasks/s', scenario: 'enqueue', metric: 'tasksPerSec', better: 'higher' },
  { label: 'bulk enqueue, tasks/s', scenario: 'bulk', metric: 'tasksPerSec', better: 'higher' },
  { label: 'drain, tasks/s (concurrency 10)', scenario: 'drain', metric: 'tasksPerSec', group: 'c=10', better: 'higher' },
  { label: 'drain, tasks/s (concurrency 50)', scenario: 'drain', metric: 'tasksPerSec', group: 'c=50', better: 'higher' },
  { label: 'wake-up p50, ms', scenario: 'latency', metric: 'p50', better: 'lower' },
  { label: 'wake-up p99, ms', scenario: 'latency', metric: 'p99', better: 'lower' },
  { label: 'idle worker, statements/s', scenario: 'idle', metric: 'stmtsPerSec', better: 'lower' },
];

// Static facts, checked against each library's documentation and the installed version's sources
// (pg-boss 12.38, graphile-worker 0.18, BullMQ 6.7); sources in BENCHMARKS.md "What each library guarantees".
const GUARANTEES = [
  ['enqueue in your transaction (outbox)', ['yes (`tx`)', 'yes (`tx`)', 'no: its own pool', 'yes (`db` option)', 'yes (`add_job` in SQL)']],
  ['handler DB writes commit with completion (exactly once)', ['yes', 'no: at least once', 'no', 'opt-in (`transactional: true`)', 'no']],
  ['stale worker cannot finish a re-claimed task (fencing)', ['yes: lease token', 'yes: lease token', 'yes: lock token', 'yes: attempt count', 'no: completion by job id']],
];

/**
 * The median of one measure for one column, or null. Enqueueing does not depend on pg-queue's
 * mode: its one row fills both pg-queue columns.
 */
function cell(record, measure, column) {
  if (!record) return null;
  const v = record.variants.find(
    (x) => (x.libKey === column.libKey || (x.lib === 'pg-queue' && x.label === 'pg-queue' && column.libKey.startsWith('pg-queue'))) && (measure.group === undefined || x.group === measure.group),
  );
  return v?.stats?.[measure.metric]?.median ?? null;
}

function runRef(run) {
  return `${run.letter}${run.quick ? ' (QUICK)' : ''}`;
}

/** Markdown: the table, the runs it draws on, and what is not measured yet. */
function summaryMarkdown(records, runs, { image } = {}) {
  const byScenario = Object.fromEntries(records.map((r) => [r.scenario, r]));
  const runById = Object.fromEntries(runs.map((r) => [r.id, r]));
  const head = ['', ...COLUMNS.map((c) => c.title), 'run'];
  const lines = [`| ${head.join(' | ')} |`, `|---|${COLUMNS.map(() => '---:').join('|')}|---|`];
  const missing = new Set();
  for (const m of MEASURES) {
    const record = byScenario[m.scenario];
    if (!record) missing.add(m.scenario);
    const values = COLUMNS.map((c) => cell(record, m, c));
    const known = values.filter((x) => x !== null);
    const best = known.length ? (m.better === 'higher' ? Math.max(...known) : Math.min(...known)) : null;
    const cells = values.map((x) => (x === null ? (record ? 'not in this run' : 'not measured yet') : x === best && known.length > 1 ? `**${fmt(x)}**` : fmt(x)));
    lines.push(`| ${m.label} | ${cells.join(' | ')} | ${record ? runRef(runById[record.run.id]) : '—'} |`);
  }
  for (const [label, cells] of GUARANTEES) lines.push(`| ${label} | ${cells.join(' | ')} | [docs](BENCHMARKS.md#what-each-library-guarantees) |`);
  const out = [lines.join('\n')];
  out.push(
    'Medians over each run\'s repetitions; **bold** = best of the row; "run" names the run below. BullMQ-PG runs with `removeOnComplete: { count: 1000 }` (its production guide\'s advice); ' +
      bullmqDefaultsNote(byScenario.drain),
  );
  const used = runs.filter((r) => r.scenarios.some((s) => MEASURES.some((m) => m.scenario === s)));
  if (used.length) out.push(used.map((r) => `- **${runRef(r)}**: ${r.date}, \`${r.command}\`, ${r.reps} repetition(s)${r.note ? `. ${firstSentence(r.note)} ([its note](BENCHMARKS.md#results)).` : ''}`).join('\n'));
  if (missing.size) out.push(`Not measured yet: ${[...missing].join(', ')} (no saved results in bench/results/).`);
  if (image) out.push(`![${imageAlt(byScenario)}](${image})`);
  return out.join('\n\n');
}

/** A run's note opens with its verdict (e.g. that the machine was disturbed): that sentence, unbolded. */
function firstSentence(note) {
  const text = note.replace(/\*\*/g, '').trim();
  const end = text.search(/[.;](\s|$)/);
  return end < 0 ? text : text.slice(0, end);
}

function bullmqDefaultsNote(drain) {
  const v = drain?.variants.find((x) => x.libKey === 'bullmq-defaults' && x.group === 'c=10');
  const m = v?.stats?.tasksPerSec?.median;
  return m ? `with its defaults (finished jobs kept) it drains ${fmt(m)} tasks/s at concurrency 10.` : 'its defaults keep every finished job.';
}

function imageAlt(byScenario) {
  const date = [byScenario.drain?.run.date, byScenario.latency?.run.date].filter(Boolean);
  return `Drain tasks/s at concurrency 10 and wake-up latency p50 / p95 / p99 per library${date.length ? ` (runs of ${[...new Set(date)].join(', ')})` : ''}`;
}

module.exports = { COLUMNS, MEASURES, GUARANTEES, cell, summaryMarkdown };
