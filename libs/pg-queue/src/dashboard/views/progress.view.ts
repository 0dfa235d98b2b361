import { progressFraction } from '../../core/progress';
import type { TaskLogEntry } from '../../types';
import { duration, timestamp, truncate } from './format';
import { html, type Html } from './html';

/**
 * A task's progress: a native <progress> bar with `done/of` for a value of that shape (no inline
 * style, which the dashboard's CSP forbids), else the value's JSON cut to `max` characters.
 */
export function progressView(value: unknown, max = 60): Html | string {
  if (value === null || value === undefined) return '';
  const f = progressFraction(value);
  if (f === null) return html`<code class="progress-json">${truncate(JSON.stringify(value), max)}</code>`;
  const label = `${f.done}/${f.of}`;
  return html`<span class="progress-cell"><progress max="${f.of}" value="${Math.min(f.of, Math.max(0, f.done))}" title="${label}">${label}</progress> <span class="progress-text">${label}</span></span>`;
}

/** A task's log, oldest first: ctx.log lines and failed attempts (error text and run time). */
export function logPanel(entries: TaskLogEntry[] | null): Html {
  const rows = (entries ?? []).map(
    (e) => html`<tr class="log-${e.kind}"><td class="nowrap">${timestamp(e.at)}</td><td class="num">${e.attempt}</td>
<td>${e.kind === 'error' ? html`failed${e.durationMs === null ? '' : ` after ${duration(e.durationMs)}`}` : 'log'}</td>
<td>${e.kind === 'error' ? html`<pre class="log-error">${e.message}</pre>` : html`<span class="mono">${e.message}</span>`}</td></tr>`,
  );
  return html`<section class="panel task-log">
<h2>Log</h2>
${rows.length === 0
    ? html`<p class="empty">Nothing logged.</p>`
    : html`<div class="scroll"><table><thead><tr><th>at</th><th class="num">attempt</th><th>entry</th><th>message</th></tr></thead><tbody>${rows}</tbody></table></div>`}
</section>`;
}
