import { html, type Html } from './html';

/** One minute of the chart: tasks that finished done, and the failed attempts counted in it. */
export interface MinuteCounts {
  done: number;
  failed: number;
}

const W = 760;
const H = 190;
const LEFT = 46;
const RIGHT = 8;
const TOP = 10;
const BOTTOM = 24;

/**
 * Done tasks and failed attempts per minute over the last hour, as bars in an inline SVG (server-rendered; no
 * script, no style attribute, so the page's Content-Security-Policy holds). `minutes[0]` is 59
 * minutes ago, `minutes[59]` this minute. Minutes before `sampledFromIndex` were not fully read
 * (the archive sample's cap) and are shaded. Each minute has a `<title>`: its tooltip.
 */
export function throughputChart(minutes: MinuteCounts[], now: Date, sampledFromIndex: number | null): Html {
  const plotW = W - LEFT - RIGHT;
  const plotH = H - TOP - BOTTOM;
  const slot = plotW / minutes.length;
  const top = niceMax(Math.max(1, ...minutes.map((m) => Math.max(m.done, m.failed))));
  const y = (v: number) => TOP + plotH - (v / top) * plotH;
  const fmt = (v: number) => (Number.isInteger(v) ? String(v) : v.toFixed(1));
  const grid = [0, top / 2, top].map(
    (v) => html`<line class="grid" x1="${LEFT}" x2="${W - RIGHT}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}"></line>
<text class="axis" x="${LEFT - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${fmt(v)}</text>`,
  );
  const labels = [60, 45, 30, 15, 0].map((ago) => {
    const x = LEFT + (minutes.length - ago) * slot;
    const anchor = ago === 60 ? 'start' : ago === 0 ? 'end' : 'middle';
    return html`<text class="axis" x="${x.toFixed(1)}" y="${H - 6}" text-anchor="${anchor}">${ago === 0 ? 'now' : `−${ago} min`}</text>`;
  });
  const cut =
    sampledFromIndex !== null && sampledFromIndex > 0
      ? html`<rect class="unsampled" x="${LEFT}" y="${TOP}" width="${(sampledFromIndex * slot).toFixed(1)}" height="${plotH}"><title>not counted: more tasks finished this hour than the dashboard reads</title></rect>`
      : '';
  const bars = minutes.map((m, i) => {
    const x = LEFT + i * slot;
    const at = new Date(now.getTime() - (minutes.length - 1 - i) * 60_000);
    const label = `${at.toISOString().slice(11, 16)} UTC: ${m.done} done, ${m.failed} failed attempts`;
    return html`<g class="minute"><title>${label}</title>
<rect class="hit" x="${x.toFixed(1)}" y="${TOP}" width="${slot.toFixed(1)}" height="${plotH}"></rect>
${m.done > 0 ? html`<rect class="done" x="${(x + slot * 0.1).toFixed(1)}" y="${y(m.done).toFixed(1)}" width="${(slot * 0.5).toFixed(1)}" height="${(TOP + plotH - y(m.done)).toFixed(1)}"></rect>` : ''}
${m.failed > 0 ? html`<rect class="failed" x="${(x + slot * 0.6).toFixed(1)}" y="${y(m.failed).toFixed(1)}" width="${(slot * 0.3).toFixed(1)}" height="${(TOP + plotH - y(m.failed)).toFixed(1)}"></rect>` : ''}
</g>`;
  });
  return html`<svg class="chart" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="done and failed tasks per minute, last hour">
${cut}${grid}${bars}${labels}
</svg>`;
}

/** The chart's top: the next of 1, 2, 5 × 10^n at or above `v`. */
function niceMax(v: number): number {
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}
