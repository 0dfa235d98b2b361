// BENCH_WRITE and `npm run bench:render`: rebuilds, from every saved scenario (bench/results/*.json),
// the summary at the top of BENCHMARKS.md and in the README's Performance section, the chart
// (bench/results/summary.svg) and BENCHMARKS.md's results section, each between its markers.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const results = require('./results');
const { READING, runHeadline } = require('./render');
const { summaryMarkdown } = require('./summary');
const { summarySvg } = require('./chart');

const MARKERS = {
  summary: ['<!-- bench:summary:start -->', '<!-- bench:summary:end -->'],
  results: ['<!-- bench:results:start -->', '<!-- bench:results:end -->'],
};

/** Replaces the text between a pair of markers; `fallback(text, block)` places them when absent. */
function replaceBlock(text, [start, end], body, fallback) {
  const block = `${start}\n${body}\n${end}`;
  const i = text.indexOf(start);
  const j = text.indexOf(end);
  if (i >= 0 && j > i) return text.slice(0, i) + block + text.slice(j + end.length);
  if (i >= 0 || j >= 0) throw new Error(`unbalanced markers ${start} … ${end}`);
  return fallback(text, block);
}

/** Right after the first line starting with `heading`, or at the end. */
function afterHeading(heading) {
  return (text, block) => {
    const at = text.search(new RegExp(`^${heading.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}.*$`, 'm'));
    if (at < 0) return `${text.trimEnd()}\n\n${block}\n`;
    const eol = text.indexOf('\n', at);
    return `${text.slice(0, eol + 1)}\n${block}\n${text.slice(eol + 1)}`;
  };
}

/** The results section: how to read it, the runs (A, B, …) and every saved scenario's tables. */
function resultsMarkdown(records, runs) {
  const letterOf = Object.fromEntries(runs.map((r) => [r.id, r.letter]));
  const out = [
    `The tables below are rebuilt from \`bench/results/<scenario>.json\` (one file per scenario, replaced only when that scenario runs with \`BENCH_WRITE=1\`); each section names the run it comes from. ${READING}`,
  ];
  for (const run of runs) {
    out.push(`#### Run ${run.letter} (${run.scenarios.join(', ')})`, runHeadline(run));
    if (run.note) out.push(run.note);
    const settings = Object.entries(run.settings).map(([lib, s]) => `- ${lib}: \`${s}\``);
    out.push([...run.lines, ...(settings.length ? ['', 'Settings per library, as run:', '', ...settings] : [])].join('\n'));
  }
  for (const r of records) {
    const [heading, ...rest] = r.markdown.split('\n');
    out.push([heading, '', `From run ${letterOf[r.run.id]} (${r.run.date}).`, ...rest].join('\n'));
  }
  return out.join('\n\n');
}

/** Writes the chart, BENCHMARKS.md and README.md under `paths` (bench/results.js outPaths). */
function publish(paths = results.outPaths()) {
  const records = results.loadAll(paths.results);
  const runs = results.runsOf(records);
  fs.mkdirSync(path.dirname(paths.svg), { recursive: true });
  fs.writeFileSync(paths.svg, summarySvg(records, runs));
  const image = path.relative(paths.root, paths.svg).split(path.sep).join('/');
  const summary = summaryMarkdown(records, runs, { image });

  let md = fs.existsSync(paths.benchmarks) ? fs.readFileSync(paths.benchmarks, 'utf8') : '# Benchmarks\n';
  md = replaceBlock(md, MARKERS.summary, summary, afterHeading('# '));
  md = replaceBlock(md, MARKERS.results, resultsMarkdown(records, runs), (text, block) => `${text.trimEnd()}\n\n## Results\n\n${block}\n`);
  fs.writeFileSync(paths.benchmarks, md);

  if (fs.existsSync(paths.readme)) {
    const readme = fs.readFileSync(paths.readme, 'utf8');
    fs.writeFileSync(paths.readme, replaceBlock(readme, MARKERS.summary, summary, afterHeading('## Performance')));
  }
  return { records: records.length, runs: runs.length, files: [paths.svg, paths.benchmarks, paths.readme] };
}

module.exports = { publish, replaceBlock, resultsMarkdown };
