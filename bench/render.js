// The markdown of a run: the machine, the settings per library, every scenario's tables, and
// BENCH_WRITE's rewrite of BENCHMARKS.md between its markers.
'use strict';

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const report = require('./report');
const { QUICK, REPS } = require('./config');

const ROOT = path.resolve(__dirname, '..');

function render(plan, results, settingsByLib, notes, m, statementStats, elapsed) {
  const out = [];
  out.push(`Run on ${new Date().toISOString().slice(0, 10)}: \`${m.command}\`${QUICK ? ' (QUICK mode: smaller counts, not comparable with a full run)' : ''}; ${REPS} repetition(s) per row, each in a fresh database and a fresh Node process; ${(elapsed / 60).toFixed(1)} min in all.`);
  out.push('');
  out.push(`- machine: ${m.nproc} CPUs (nproc), ${m.cpu}, ${m.memGiB} GiB memory`);
  out.push(`- Node ${m.node}; PostgreSQL ${m.postgres} (${m.database})`);
  out.push(`- PostgreSQL settings: ${Object.entries(m.settings).map(([k, v]) => `${k}=${v}`).join(', ')} — durability at the defaults (fsync, synchronous_commit and full_page_writes on)`);
  out.push(`- versions: ${Object.entries(m.versions).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  const la = (l) => l.map((x) => x.toFixed(2)).join(' / ');
  out.push(`- load average (1/5/15 min) at start ${la(m.loadBefore)}, at end ${la(os.loadavg())}: anything else running on the machine shows here`);
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
  }
  return out.join('\n');
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

module.exports = { render, writeBenchmarksMd };
