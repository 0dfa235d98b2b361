import { TASK_STATES } from '../../core/task-states';
import { DASHBOARD_LIMITS, type TaskListFilter, type TaskListPage } from '../../sql/dashboard.repository';
import { relative, timestamp, truncate } from './format';
import { html, type Html } from './html';
import { actionForm, page, stateBadge, tagLinks, type PageContext } from './layout.view';
import { progressView } from './progress.view';


/** Tasks, newest first: a filter form, one page, the next-page link, and retry-dead for a queue. */
export function taskListPage(ctx: PageContext, filter: TaskListFilter, result: TaskListPage, notice: { key?: string; count?: number }): Html {
  const l = ctx.links;
  const query = { queue: filter.queue, state: filter.state, key: filter.key, group: filter.group, tag: filter.tag, error: filter.error };
  const field = (name: string, label: string, value: string | null, placeholder = '') =>
    html`<label>${label}<input type="text" name="${name}" value="${value ?? ''}" placeholder="${placeholder}" maxlength="500"></label>`;
  const form = html`<form method="get" action="${l.tasks()}" class="filters">
${field('queue', 'queue', filter.queue, 'any')}
<label>state<select name="state"><option value="">any</option>${TASK_STATES.map((s) => html`<option value="${s}"${s === filter.state ? html` selected` : ''}>${s}</option>`)}</select></label>
${field('key', 'key', filter.key)}
${field('group', 'group', filter.group)}
${field('tag', 'tag', filter.tag)}
${field('error', 'error contains', filter.error)}
<button type="submit" class="btn">Filter</button> <a class="btn ghost" href="${l.tasks()}">Clear</a>
</form>`;
  const rows = result.rows.map(
    (t) => html`<tr>
<td><a href="${l.task(t.id)}">#${t.id}</a></td>
<td>${t.queue}</td>
<td>${stateBadge(t.state)}</td>
<td class="num">${t.attempt} / ${t.maxAttempts ?? '—'}</td>
<td class="nowrap">${progressView(t.progress, 40)}</td>
<td class="num">${t.priority}</td>
<td class="nowrap" title="${timestamp(t.finishedAt ?? t.runAt)}">${t.finishedAt ? `finished ${relative(t.finishedAt, ctx.now)}` : `due ${relative(t.runAt, ctx.now)}`}</td>
<td class="mono nowrap">${t.key ? truncate(t.key, 40) : ''}</td>
<td class="mono nowrap">${t.group ? truncate(t.group, 40) : ''}</td>
<td class="tags">${tagLinks(t.tags, (tag) => l.tasks({ tag }))}</td>
<td class="error" title="${t.lastError ?? ''}">${t.lastError ? truncate(t.lastError.split('\n')[0], 120) : ''}</td>
</tr>`,
  );
  const next = result.next
    ? html`<a class="btn" rel="next" href="${l.tasks({ ...query, cursor: result.next })}">${result.budgetSpent ? 'Search further' : 'Older'} →</a>`
    : '';
  const budgetNote = result.budgetSpent
    ? html`<p class="hint">This page read the newest ${DASHBOARD_LIMITS.scanBudget} tasks of each table below its start without finding ${DASHBOARD_LIMITS.pageSize} matches; older tasks are searched on the next page (down from #${result.next}).</p>`
    : '';
  const retryDead = filter.queue
    ? actionForm(
        ctx,
        l.retryDead(),
        'Retry dead tasks',
        html`<input type="hidden" name="queue" value="${filter.queue}">
<label>Dead tasks of <strong>${filter.queue}</strong> whose last error contains <input type="text" name="error" value="${filter.error ?? ''}" placeholder="(any error)" maxlength="500"></label>`,
        'btn danger',
      )
    : '';
  const content = html`<h1>Tasks</h1>
${form}
${retryDead ? html`<section class="panel bulk">${retryDead}</section>` : ''}
<section class="panel">
${result.rows.length === 0
    ? html`<p class="empty">No task matches${result.budgetSpent ? ' among the tasks read so far' : ''}.</p>`
    : html`<table class="grid-table tasks">
<thead><tr><th>id</th><th>queue</th><th>state</th><th class="num">attempt</th><th>progress</th><th class="num">priority</th><th>when</th><th>key</th><th>group</th><th>tags</th><th>last error</th></tr></thead>
<tbody>${rows}</tbody>
</table>`}
${budgetNote}
<nav class="pager">${filter.cursor ? html`<a class="btn ghost" href="${l.tasks(query)}">← Newest</a>` : ''} ${next}</nav>
</section>`;
  return page(ctx, 'Tasks', 'tasks', content, notice);
}
