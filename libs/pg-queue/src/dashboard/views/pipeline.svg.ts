import type { PipelineStage } from '../../sql/dashboard.repository';
import { duration, truncate } from './format';
import { html, type Html } from './html';
import type { Links } from './links';

const BOX_W = 190;
const BOX_H = 58;
const GAP_X = 60;
const GAP_Y = 16;
const PAD = 12;

/**
 * A pipeline as a picture: one column per stage (root first), one box per task with its queue,
 * id, state and run time, and an arrow from each parent to each follow-up it enqueued. Tasks of a
 * stage are ordered by their parent's place, then by id, so arrows rarely cross. Each box links to
 * its task; `current` is outlined. Inline SVG with classes only (the stylesheet colours states).
 */
export function pipelinePicture(stages: PipelineStage[], current: string, links: Links): Html {
  const columns: PipelineStage[][] = [];
  const row = new Map<string, number>();
  for (const s of [...stages].sort((a, b) => a.stage - b.stage)) (columns[s.stage] ??= []).push(s);
  columns.forEach((col) => {
    col.sort((a, b) => (row.get(a.parentId ?? '') ?? 0) - (row.get(b.parentId ?? '') ?? 0) || cmpId(a.id, b.id));
    col.forEach((s, i) => row.set(s.id, i));
  });
  const at = new Map<string, { x: number; y: number }>();
  columns.forEach((col, c) => col.forEach((s, r) => at.set(s.id, { x: PAD + c * (BOX_W + GAP_X), y: PAD + r * (BOX_H + GAP_Y) })));
  const width = PAD * 2 + columns.length * BOX_W + (columns.length - 1) * GAP_X;
  const height = PAD * 2 + Math.max(...columns.map((c) => c.length)) * (BOX_H + GAP_Y) - GAP_Y;

  const arrows = stages.map((s) => {
    const from = s.parentId ? at.get(s.parentId) : undefined;
    const to = at.get(s.id);
    if (!from || !to) return '';
    const [x1, y1, x2, y2] = [from.x + BOX_W, from.y + BOX_H / 2, to.x - 2, to.y + BOX_H / 2];
    return html`<path class="edge" d="M${x1} ${y1} C${x1 + GAP_X / 2} ${y1}, ${x2 - GAP_X / 2} ${y2}, ${x2} ${y2}" marker-end="url(#pgq-arrow)"></path>`;
  });
  const boxes = stages.map((s) => {
    const p = at.get(s.id)!;
    const ran = s.startedAt && s.finishedAt ? duration(s.finishedAt.getTime() - s.startedAt.getTime()) : s.state;
    return html`<a href="${links.task(s.id)}" class="node st-${s.state}${s.id === current ? ' current' : ''}">
<title>#${s.id} ${s.queue}: ${s.state}, attempt ${s.attempt}</title>
<rect x="${p.x}" y="${p.y}" width="${BOX_W}" height="${BOX_H}" rx="6"></rect>
<text class="q" x="${p.x + 10}" y="${p.y + 20}">${truncate(s.queue, 24)}</text>
<text class="meta" x="${p.x + 10}" y="${p.y + 38}">#${s.id} · ${s.state}</text>
<text class="meta" x="${p.x + 10}" y="${p.y + 52}">stage ${s.stage} · ${ran}</text>
</a>`;
  });
  return html`<svg class="pipeline" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-label="pipeline stages">
<defs><marker id="pgq-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" orient="auto"><path class="arrowhead" d="M0 0 L10 5 L0 10 z"></path></marker></defs>
${arrows}${boxes}
</svg>`;
}

/** Decimal ids compared as numbers (they exceed 2^53). */
function cmpId(a: string, b: string): number {
  return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
}
