// Aggregation and markdown tables for bench/run.js.
'use strict';

const PEERS = new Set(['pg-boss', 'graphile-worker', 'bullmq', 'dbos']);

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function fmt(x) {
  if (x === null || x === undefined || Number.isNaN(x)) return 'n/a';
  const a = Math.abs(x);
  if (a >= 1000) return Math.round(x).toLocaleString('en-US');
  if (a >= 100) return x.toFixed(0);
  if (a >= 10) return x.toFixed(1);
  if (a >= 1) return x.toFixed(2);
  if (a === 0) return '0';
  return x.toPrecision(2);
}

function ratio(x) {
  if (x === null || x === undefined || !Number.isFinite(x)) return 'n/a';
  return `${x >= 10 ? x.toFixed(1) : x.toFixed(2)}×`;
}

/** Values of one metric over the successful repetitions of one variant. */
function values(results, variantKey, metric) {
  return results
    .filter((r) => r.variantKey === variantKey && r.ok && r.metrics[metric] !== null && r.metrics[metric] !== undefined)
    .map((r) => r.metrics[metric]);
}

function summary(results, variant, metric) {
  const xs = values(results, variant.key, metric);
  const runs = results.filter((r) => r.variantKey === variant.key);
  if (xs.length === 0) return { n: 0, runs: runs.length, min: null, median: null, max: null };
  return { n: xs.length, runs: runs.length, min: Math.min(...xs), median: median(xs), max: Math.max(...xs) };
}

/**
 * One markdown table: a row per variant with min / median / max over repetitions, and for pg-queue
 * rows the ratio of its median to the best peer's median in the same group (same concurrency).
 */
function metricTable(results, variants, metric) {
  const groups = [...new Set(variants.map((v) => v.group))];
  const showGroup = groups.length > 1 || variants.some((v) => v.group !== '');
  const head = ['library', ...(showGroup ? ['setting'] : []), 'runs', 'min', 'median', 'max', 'pg-queue ÷ best peer'];
  const lines = [`| ${head.join(' | ')} |`, `|${head.map((h, i) => (i === 0 ? '---' : '---:')).join('|')}|`];
  for (const group of groups) {
    const inGroup = variants.filter((v) => v.group === group);
    const peerMedians = inGroup
      .filter((v) => PEERS.has(v.lib))
      .map((v) => ({ v, m: summary(results, v, metric.key).median }))
      .filter((p) => p.m !== null);
    let best = null;
    for (const p of peerMedians) {
      if (!best || (metric.better === 'higher' ? p.m > best.m : p.m < best.m)) best = p;
    }
    for (const v of inGroup) {
      const s = summary(results, v, metric.key);
      let r = '';
      if (v.lib === 'pg-queue') {
        r = best && s.median !== null && best.m !== 0 ? `${ratio(s.median / best.m)} (vs ${best.v.lib})` : 'n/a';
      }
      const cells = [v.label, ...(showGroup ? [v.group] : []), `${s.n}/${s.runs}`, fmt(s.min), fmt(s.median), fmt(s.max), r];
      lines.push(`| ${cells.join(' | ')} |`);
    }
  }
  return lines.join('\n');
}

/** A two-column comparison: `num` variants' medians divided by `den` variants' medians. */
function compareTable(title, rows) {
  const lines = [`| ${title.join(' | ')} |`, `|${title.map((h, i) => (i === 0 ? '---' : '---:')).join('|')}|`];
  for (const r of rows) lines.push(`| ${r.join(' | ')} |`);
  return lines.join('\n');
}

module.exports = { median, fmt, ratio, summary, metricTable, compareTable, PEERS };
