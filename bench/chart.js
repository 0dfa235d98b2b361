// bench/results/summary.svg: drain tasks/s at concurrency 10 per library and mode, and wake-up
// latency p50 / p95 / p99 per library, from the saved scenarios. Hand-written SVG (text as <text>,
// no script, no external font) so that GitHub's markdown view shows it as an image. Pure.
'use strict';

const { fmt } = require('./report');

const DRAIN_BARS = [
  ['pg-queue-transactional', 'pg-queue (transactional)'],
  ['pg-queue-lease', 'pg-queue (lease)'],
  ['bullmq-production', 'BullMQ-PG'],
  ['bullmq-defaults', 'BullMQ-PG (defaults)'],
  ['pg-boss', 'pg-boss'],
  ['graphile-worker', 'graphile-worker'],
];
const WAKE_BARS = DRAIN_BARS.filter(([k]) => k !== 'bullmq-defaults');
const PERCENTILES = [
  ['p50', '#1f77b4'],
  ['p95', '#6baed6'],
  ['p99', '#9ecae1'],
];
const PGQ = '#1f77b4';
const PEER = '#8c8c8c';

function esc(s) {
  return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** What a missing bar says: the scenario was never saved, or its run left this library out. */
function absent(record) {
  return record ? 'not in this run' : 'not measured yet';
}

function median(record, libKey, metric, group) {
  const v = record?.variants.find((x) => x.libKey === libKey && (group === undefined || x.group === group));
  return v?.stats?.[metric]?.median ?? null;
}

/** One horizontal bar with its label on the left and its value after it. */
function bar({ x, y, h, labelW, width, value, max, color, label, small, missing }) {
  const out = [];
  if (label) out.push(`<text x="${x + labelW - 6}" y="${y + h - 2}" text-anchor="end">${esc(label)}</text>`);
  if (value === null) {
    out.push(`<text x="${x + labelW}" y="${y + h - 2}" fill="#888">${missing}</text>`);
    return out;
  }
  const w = max > 0 ? Math.max(1, (value / max) * width) : 1;
  out.push(`<rect x="${x + labelW}" y="${y}" width="${w.toFixed(1)}" height="${h}" fill="${color}"/>`);
  out.push(`<text x="${(x + labelW + w + 4).toFixed(1)}" y="${y + h - 1}"${small ? ' font-size="10"' : ''}>${esc(fmt(value))}</text>`);
  return out;
}

function summarySvg(records, runs) {
  const byScenario = Object.fromEntries(records.map((r) => [r.scenario, r]));
  const drain = byScenario.drain;
  const wake = byScenario.latency;
  const W = 860;
  const top = 48;
  const parts = [];

  // Left: drain at concurrency 10.
  const dVals = DRAIN_BARS.map(([k]) => median(drain, k, 'tasksPerSec', 'c=10'));
  const dMax = Math.max(0, ...dVals.filter((x) => x !== null));
  parts.push(`<text x="10" y="22" font-weight="bold">Drain, tasks/s at concurrency 10 (higher is better)</text>`);
  DRAIN_BARS.forEach(([k, label], i) => {
    parts.push(...bar({ x: 10, y: top + i * 24, h: 16, labelW: 160, width: 170, value: dVals[i], max: dMax, color: k.startsWith('pg-queue') ? PGQ : PEER, label, missing: absent(drain) }));
  });

  // Right: wake-up percentiles, three thin bars per library.
  const X = 440;
  const wVals = WAKE_BARS.map(([k]) => PERCENTILES.map(([p]) => median(wake, k, p)));
  const wMax = Math.max(0, ...wVals.flat().filter((x) => x !== null));
  parts.push(`<text x="${X}" y="22" font-weight="bold">Wake-up, enqueue → handler start, ms (lower is better)</text>`);
  PERCENTILES.forEach(([p, color], j) => {
    parts.push(`<rect x="${X + 160 + j * 60}" y="30" width="10" height="10" fill="${color}"/>`, `<text x="${X + 174 + j * 60}" y="39">${p}</text>`);
  });
  WAKE_BARS.forEach(([, label], i) => {
    const y = top + i * 36;
    parts.push(`<text x="${X + 154}" y="${y + 19}" text-anchor="end">${esc(label)}</text>`);
    if (wVals[i].every((v) => v === null)) return parts.push(`<text x="${X + 160}" y="${y + 19}" fill="#888">${absent(wake)}</text>`);
    PERCENTILES.forEach(([, color], j) => parts.push(...bar({ x: X, y: y + j * 11, h: 10, labelW: 160, width: 190, value: wVals[i][j], max: wMax, color, small: true })));
  });

  // Where the figures come from.
  const H = top + Math.max(DRAIN_BARS.length * 24, WAKE_BARS.length * 36) + 36;
  const runOf = Object.fromEntries(runs.map((r) => [r.id, r]));
  const src = [drain, wake].filter(Boolean).map((r) => {
    const run = runOf[r.run.id];
    return `${r === drain ? 'drain' : 'wake-up'} from run ${run?.letter ?? '?'} (${r.run.date}${r.run.quick ? ', QUICK' : ''}${run?.note ? ', see its note' : ''})`;
  });
  parts.push(
    `<text x="10" y="${H - 24}" fill="#555">Medians over each run's repetitions: ${esc(src.join('; ') || 'no saved results')}.</text>`,
    `<text x="10" y="${H - 8}" fill="#555">Node and PostgreSQL on one machine; the method, every table and each run's machine and load: BENCHMARKS.md.</text>`,
  );

  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="Helvetica, Arial, sans-serif" font-size="12" fill="#222">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    ...parts.map((p) => `  ${p}`),
    '</svg>',
    '',
  ].join('\n');
}

module.exports = { summarySvg };
