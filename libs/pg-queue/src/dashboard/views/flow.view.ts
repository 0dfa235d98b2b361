import type { Overview } from '../dashboard.data';
import { relative, timestamp, truncate } from './format';
import { html, type Html } from './html';

/** A queue's cooldown badge in the overview: the whole queue, or how many of its partitions. */
export function cooldownBadge(o: Overview, queue: string, now: Date): Html | '' {
  const mine = o.cooldowns.filter((b) => b.name === queue && b.scope !== 'limiter');
  if (mine.length === 0) return '';
  const whole = mine.find((b) => b.scope === 'queue');
  return whole
    ? html` <span class="badge st-cooldown" title="a handler was rate limited: nothing of this queue is claimed until ${timestamp(whole.until)}">cooldown ends ${relative(whole.until, now)}</span>`
    : html` <span class="hint" title="partitions cooling down on their own">partitions cooling down: ${mine.map((b) => b.partition || '(none)').join(', ')}</span>`;
}

/**
 * Flow control on the overview, shown when there is any: the cooldowns in force (with their end
 * and the error that set them) and each named limiter's budget in use.
 */
export function flowPanel(o: Overview, now: Date): Html | '' {
  if (o.cooldowns.length === 0 && o.limiters.length === 0) return '';
  const cooldowns = o.cooldowns.map(
    (b) => html`<tr><td>${b.scope}</td><th scope="row">${b.name}</th><td>${b.partition ?? ''}</td>
<td title="${timestamp(b.until)}">${timestamp(b.until)} (${relative(b.until, now)})</td><td class="error">${truncate(b.reason ?? '', 120)}</td></tr>`,
  );
  const limiters = o.limiters.map(
    (l) => html`<tr><th scope="row">${l.name}</th>
<td class="num">${l.running}${l.concurrency === null ? '' : html` / ${l.concurrency}`}</td>
<td class="num">${l.rateLimit === null ? '—' : `${l.windowCount} / ${l.rateLimit.max} per ${l.rateLimit.perMs} ms`}</td>
<td>${l.cooldownUntil ? html`<span class="badge st-cooldown">until ${timestamp(l.cooldownUntil)}</span>` : ''}</td></tr>`,
  );
  return html`<section class="panel flow">
<h2>Flow control</h2>
${o.limiters.length === 0
    ? ''
    : html`<table class="grid-table limiters">
<thead><tr><th>limiter</th><th class="num" title="running tasks of all its queues, on every instance / its concurrency">running</th><th class="num" title="starts inside its rate window / its rate limit">rate window</th><th>cooldown</th></tr></thead>
<tbody>${limiters}</tbody></table>`}
${o.cooldowns.length === 0
    ? html`<p class="empty">No cooldowns in force.</p>`
    : html`<table class="grid-table cooldowns">
<thead><tr><th>scope</th><th>name</th><th>partition</th><th>until</th><th>reason</th></tr></thead>
<tbody>${cooldowns}</tbody></table>`}
<p class="hint">A handler's RateLimitedError starts a cooldown of its task, partition, queue or limiter: nothing of it is claimed by any instance until the end shown; no attempt is counted.</p>
</section>`;
}
