import type { ScheduleListRow } from '../../sql/dashboard.repository';
import { duration, relative, timestamp } from './format';
import { html, type Html } from './html';
import { page, type PageContext } from './layout.view';

/** Every schedule: what it enqueues, how often, its next tick and its last run. */
export function schedulesPage(ctx: PageContext, schedules: ScheduleListRow[]): Html {
  const l = ctx.links;
  const rows = schedules.map(
    (s) => html`<tr>
<th scope="row" class="mono">${s.name}</th>
<td><a href="${l.tasks({ queue: s.queue })}">${s.queue}</a></td>
<td class="mono">${s.cron !== null ? html`${s.cron}${s.tz ? html` <span class="rel">${s.tz}</span>` : ''}` : `every ${duration(s.everyMs)}`}</td>
<td>${s.missed}</td>
<td>${timestamp(s.nextRunAt)} <span class="rel">${relative(s.nextRunAt, s.dbNow)}</span></td>
<td>${s.lastRunAt ? html`${timestamp(s.lastRunAt)} <span class="rel">${relative(s.lastRunAt, s.dbNow)}</span>` : 'never'}</td>
</tr>`,
  );
  const content = html`<h1>Schedules</h1>
<section class="panel">
${schedules.length === 0
    ? html`<p class="empty">No schedules.</p>`
    : html`<table class="grid-table">
<thead><tr><th>name</th><th>queue</th><th>cron / every</th><th>missed ticks</th><th>next tick</th><th>last run</th></tr></thead>
<tbody>${rows}</tbody>
</table>`}
</section>`;
  return page(ctx, 'Schedules', 'schedules', content);
}
