import { DASHBOARD_LIMITS } from '../../sql/dashboard.repository';
import type { Overview } from '../dashboard.data';
import { capped, duration, timestamp } from './format';
import { html, type Html } from './html';
import { actionForm, page, type PageContext } from './layout.view';
import { throughputChart } from './throughput.chart';
import { cooldownBadge, flowPanel } from './flow.view';

/** Queues: counts by state, the last hour per minute, the oldest due task, run-time percentiles. */
export function overviewPage(ctx: PageContext, o: Overview, notice: { key?: string; count?: number }): Html {
  const cap = DASHBOARD_LIMITS.countCap;
  const l = ctx.links;
  const sum = (pick: (q: Overview['queues'][number]) => number) => o.queues.reduce((a, q) => a + pick(q), 0);
  const waits = o.queues.flatMap((q) => (q.oldestDueMs === null ? [] : [q.oldestDueMs]));
  const oldest = waits.length > 0 ? Math.max(...waits) : null;
  const unhandled = o.queues.filter((q) => q.unhandledMs !== null).length;
  const card = (label: string, value: string, cls = '') => html`<div class="card ${cls}"><div class="value">${value}</div><div class="label">${label}</div></div>`;
  const pauseButton = (q: Overview['queues'][number]) =>
    actionForm(ctx, q.paused ? l.resume() : l.pause(), q.paused ? 'Resume' : 'Pause', html`<input type="hidden" name="queue" value="${q.queue}">`, q.paused ? 'btn' : 'btn danger');
  const rows = o.queues.map(
    (q) => html`<tr${q.paused ? html` class="paused"` : ''}>
<th scope="row"><a href="${l.tasks({ queue: q.queue })}">${q.queue}</a>${q.paused ? html` <span class="badge st-paused" title="nothing of this queue is claimed until it is resumed">paused</span>` : ''}${
      q.pausedPartitions.length > 0 ? html` <span class="hint" title="partitions paused on their own">partitions paused: ${q.pausedPartitions.join(', ')}</span>` : ''
    }${cooldownBadge(o, q.queue, ctx.now)}</th>
<td class="num">${capped(q.due, cap)}</td>
<td class="num">${capped(q.later, cap)}</td>
<td class="num">${capped(q.waiting, cap)}</td>
<td class="num">${q.running}</td>
<td class="num">${q.dead > 0 ? html`<a class="dead" href="${l.tasks({ queue: q.queue, state: 'dead' })}">${capped(q.dead, cap)}</a>` : '0'}</td>
<td class="num">${q.done}</td>
<td class="num">${q.failed > 0 ? html`<span class="failed">${q.failed}</span>` : '0'}</td>
<td class="num">${q.cancelled}</td>
<td class="num">${duration(q.oldestDueMs)}</td>
<td class="num">${
      q.unhandledMs !== null
        ? html`<span class="failed" title="due tasks and no running instance handles this queue for ${duration(q.unhandledMs)}: a typo in a @TaskHandler queue name, or no worker deployed?">none</span>`
        : q.handlers === null
          ? ''
          : String(q.handlers)
    }</td>
<td class="num">${duration(q.p50Ms)}</td>
<td class="num">${duration(q.p95Ms)}</td>
<td>${pauseButton(q)}</td>
</tr>`,
  );
  const content = html`<h1>Queues</h1>
<section class="cards">
${card('due now', capped(sum((q) => q.due), cap))}
${card('running', String(sum((q) => q.running)))}
${card('dead', capped(sum((q) => q.dead), cap), sum((q) => q.dead) > 0 ? 'bad' : '')}
${card('done, last hour', String(sum((q) => q.done)), 'good')}
${card('failed attempts, last hour', String(sum((q) => q.failed)), sum((q) => q.failed) > 0 ? 'bad' : '')}
${card('oldest due task waiting', duration(oldest))}
${unhandled > 0 ? card('queues nobody handles', String(unhandled), 'bad') : ''}
</section>
<section class="panel">
<h2>Last hour, per minute</h2>
<p class="legend"><span class="key done"></span> done <span class="key failed"></span> failed attempts
<span class="hint">each task's failed attempts count at the minute it finished, died or last failed (attempts are not stored one by one)</span></p>
${throughputChart(o.minutes, ctx.now, o.sampledFromIndex)}
${o.sampledFrom ? html`<p class="hint">More tasks finished this hour than the dashboard reads (${DASHBOARD_LIMITS.sampleCap}): finished tasks are counted from ${timestamp(o.sampledFrom)} on.</p>` : ''}
</section>
<section class="panel">
<h2>By queue</h2>
${o.queues.length === 0
    ? html`<p class="empty">No tasks yet.</p>`
    : html`<table class="grid-table">
<thead><tr><th>queue</th><th class="num" title="pending, due">due</th><th class="num" title="pending, run_at in the future">later</th><th class="num" title="waiting for the tasks it depends on">waiting</th><th class="num">running</th><th class="num">dead</th>
<th class="num">done 1 h</th><th class="num">failed 1 h</th><th class="num">cancelled 1 h</th><th class="num">oldest due</th><th class="num" title="running instances that handle the queue">handlers</th><th class="num">run p50</th><th class="num">run p95</th><th>${ctx.readOnly ? '' : 'claims'}</th></tr></thead>
<tbody>${rows}</tbody>
</table>
<p class="hint">Counts of pending, waiting and dead tasks stop at ${cap}. Run times are over the tasks that finished done in the last hour.</p>`}
</section>
${flowPanel(o, ctx.now)}`;
  return page(ctx, 'Queues', 'queues', content, notice);
}
