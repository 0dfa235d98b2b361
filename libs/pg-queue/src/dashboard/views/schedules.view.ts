import type { ScheduleInfo } from '../../client/schedules.client';
import type { ScheduleListRow } from '../../sql/dashboard.repository';
import { duration, relative, timestamp } from './format';
import { html, type Html } from './html';
import { actionForm, page, type PageContext } from './layout.view';

/**
 * Every schedule: what it enqueues, how often, its next tick and its last run. Unless read-only,
 * runtime schedules (made by upsertSchedule) have Edit and Remove, and a form creates one or
 * changes the one being edited (`editing`); declared schedules change only in the code.
 */
export function schedulesPage(ctx: PageContext, schedules: ScheduleListRow[], notice: { key?: string }, editing: ScheduleInfo | null): Html {
  const l = ctx.links;
  const actions = (s: ScheduleListRow) =>
    ctx.readOnly || !s.runtime
      ? ''
      : html`<a class="btn ghost" href="${l.schedules({ edit: s.name })}">Edit</a>${actionForm(ctx, l.scheduleAction('remove'), 'Remove', html`<input type="hidden" name="name" value="${s.name}">`, 'btn danger')}`;
  const rows = schedules.map(
    (s) => html`<tr>
<th scope="row" class="mono">${s.name}</th>
<td><a href="${l.tasks({ queue: s.queue })}">${s.queue}</a></td>
<td class="mono">${s.cron !== null ? html`${s.cron}${s.tz ? html` <span class="rel">${s.tz}</span>` : ''}` : `every ${duration(s.everyMs)}`}</td>
<td>${s.missed}</td>
<td>${timestamp(s.nextRunAt)} <span class="rel">${relative(s.nextRunAt, s.dbNow)}</span></td>
<td>${s.lastRunAt ? html`${timestamp(s.lastRunAt)} <span class="rel">${relative(s.lastRunAt, s.dbNow)}</span>` : 'never'}</td>
<td>${s.runtime ? 'run time' : 'code'}</td>
${ctx.readOnly ? '' : html`<td>${actions(s)}</td>`}
</tr>`,
  );
  const content = html`<h1>Schedules</h1>
<section class="panel">
${schedules.length === 0
    ? html`<p class="empty">No schedules.</p>`
    : html`<table class="grid-table">
<thead><tr><th>name</th><th>queue</th><th>cron / every</th><th>missed ticks</th><th>next tick</th><th>last run</th><th>made in</th>${ctx.readOnly ? '' : html`<th></th>`}</tr></thead>
<tbody>${rows}</tbody>
</table>`}
</section>
${ctx.readOnly ? '' : scheduleForm(ctx, editing)}`;
  return page(ctx, 'Schedules', 'schedules', content, notice);
}

/** Create a runtime schedule, or change `editing` (same name: an upsert). Cron and timezone, or every (ms). */
function scheduleForm(ctx: PageContext, editing: ScheduleInfo | null): Html {
  const e = editing;
  const field = (name: string, label: string, value: string | number | null | undefined, placeholder = '') =>
    html`<label>${label} <input name="${name}" value="${value ?? ''}" placeholder="${placeholder}"></label>`;
  return html`<section class="panel">
<h2>${e ? html`Edit schedule <span class="mono">${e.name}</span>` : 'New schedule'}</h2>
<form method="post" action="${ctx.links.scheduleAction('upsert')}" class="filters schedule-form">
<input type="hidden" name="_csrf" value="${ctx.csrfToken}">
${field('name', 'name', e?.name, 'nightly-report')}
${field('queue', 'queue', e?.queue, 'reports.daily')}
${field('cron', 'cron', e?.cron, '0 3 * * *')}
${field('timezone', 'timezone (IANA, cron only)', e?.timezone, 'UTC')}
${field('everyMs', 'or every (ms)', e?.everyMs, '60000')}
<label>missed ticks <select name="missed">${['skip', 'once'].map((m) => html`<option value="${m}"${e?.missed === m ? ' selected' : ''}>${m}</option>`)}</select></label>
<label>payload (JSON) <textarea name="payload" rows="2" placeholder="{}">${e ? JSON.stringify(e.payload) : ''}</textarea></label>
<button type="submit" class="btn">${e ? 'Save' : 'Create'}</button>
</form>
</section>`;
}
