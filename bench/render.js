// The markdown of a run: the machine, the settings per library and every scenario's tables. Each
// scenario's section is also saved with its figures (bench/results.js), and BENCH_WRITE rebuilds
// BENCHMARKS.md from the saved sections (bench/publish.js).
'use strict';

const os = require('node:os');
const report = require('./report');

const READING =
  "Each table: min / median / max over the repetitions (`runs` = successful/attempted); the last column divides pg-queue's median by the best peer's median (pg-boss, graphile-worker or BullMQ on PostgreSQL, either of its rows) in the same setting. For throughput above 1× means pg-queue is faster; for times and statement counts below 1× means pg-queue is cheaper.";

/** The run's description: machine, versions, PostgreSQL settings, load at its start and now. */
function runLines(m, statementStats) {
  const la = (l) => l.map((x) => x.toFixed(2)).join(' / ');
  const out = [
    `- machine: ${m.nproc} CPUs (nproc), ${m.cpu}, ${m.memGiB} GiB memory`,
    `- Node ${m.node}; PostgreSQL ${m.postgres} (${m.database})`,
    `- PostgreSQL settings: ${Object.entries(m.settings).map(([k, v]) => `${k}=${v}`).join(', ')} — durability at the defaults (fsync, synchronous_commit and full_page_writes on)`,
    `- versions: ${Object.entries(m.versions).map(([k, v]) => `${k} ${v}`).join(', ')}`,
    `- load average (1/5/15 min) at start ${la(m.loadBefore)}, at end ${la(os.loadavg())}: anything else running on the machine shows here`,
  ];
  if (!statementStats) out.push('- pg_stat_statements was not available: statement counts are n/a');
  return out;
}

/** One scenario's section: its heading, tables, comparisons, failures and notes. */
function section(sc, plan, results, notes) {
  const rows = sc.all;
  const out = [`### ${sc.num}. ${sc.title}`];
  if (sc.table) out.push('', sc.table(plan, results));
  else {
    for (const metric of sc.metrics) {
      out.push('', `${metric.label} (${metric.better} is better)`, '', report.metricTable(results, rows, metric));
    }
  }
  if (sc.after) out.push('', sc.after(plan, results));
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
  const dupes = results.filter((r) => r.scenario === sc.id && r.ok && r.notes?.some((n) => n.includes('duplicate') || n.includes('ended failed')));
  for (const d of dupes) out.push('', `Note: ${d.variantKey} rep ${d.rep}: ${d.notes.join('; ')}`);
  return out.join('\n');
}

/** The first line of a run's description: when, what command, how many repetitions, how long. */
function runHeadline(run) {
  return `Run on ${run.date}: \`${run.command}\`${run.quick ? ' (QUICK mode: smaller counts, not comparable with a full run)' : ''}; ${run.reps} repetition(s) per row, each in a fresh database and a fresh Node process; ${run.minutes.toFixed(1)} min in all.`;
}

/** The whole run for stdout. */
function render(plan, results, settingsByLib, notes, run) {
  const out = [runHeadline(run), '', ...run.lines, '', 'Settings per library, as run:', ''];
  for (const [lib, s] of Object.entries(settingsByLib)) out.push(`- ${lib}: \`${s}\``);
  out.push('', READING);
  for (const sc of plan) out.push('', section(sc, plan, results, notes));
  return out.join('\n');
}

module.exports = { READING, runLines, section, runHeadline, render };
