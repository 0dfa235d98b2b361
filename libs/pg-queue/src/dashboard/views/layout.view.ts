import { truncate } from './format';
import { html, type Html } from './html';
import type { Links } from './links';

/** What every page shares: where it lives, whether actions are offered, the form token. */
export interface PageContext {
  links: Links;
  readOnly: boolean;
  /** The per-process token each action form carries (see dashboard.csrf.ts). */
  csrfToken: string;
  now: Date;
}

export type Section = 'queues' | 'tasks' | 'schedules';

/**
 * What an action did, shown once after its redirect. The query only selects one of these fixed
 * sentences (an unknown key shows nothing), so a crafted link cannot put words on the page.
 */
const NOTICES: Record<string, { text: string; ok: boolean }> = {
  retried: { text: 'The task is pending again, with its attempts reset.', ok: true },
  'not-retried': { text: 'Nothing retried: only a dead or cancelled task still in the task table can be retried (or a newer task holds its key).', ok: false },
  'not-retried-dependencies': {
    text: 'Nothing retried: a task it depends on had not ended done when it was cancelled, so it lacks that result. Enqueue a new task with the same dependencies instead.',
    ok: false,
  },
  cancelled: { text: 'The task was cancelled.', ok: true },
  'cancel-requested': { text: 'Cancel requested: the running attempt is being aborted and the task will end cancelled.', ok: true },
  'not-cancellable': { text: 'Nothing cancelled: the task had already finished.', ok: false },
  'priority-set': { text: 'Priority changed.', ok: true },
  'priority-not-set': { text: 'Priority unchanged: only a pending task can be moved.', ok: false },
  'retried-dead': { text: 'Dead tasks retried:', ok: true },
  promoted: { text: 'The task is due now: a worker takes it at once.', ok: true },
  rescheduled: { text: 'The task is due at its new time.', ok: true },
  'payload-updated': { text: 'Payload replaced: the task runs with the new one.', ok: true },
  'not-changed-running': { text: 'Nothing changed: the task runs now.', ok: false },
  'not-changed-waiting': { text: 'Nothing changed: the task waits for the tasks it depends on, and runs once they are done.', ok: false },
  'not-changed-started': { text: 'Nothing changed: the task is a workflow that has started.', ok: false },
  'not-changed-finished': { text: 'Nothing changed: the task has finished.', ok: false },
  'not-changed-not-found': { text: 'Nothing changed: there is no such task.', ok: false },
  paused: { text: 'Queue paused: no instance claims its tasks until it is resumed; running tasks finish, enqueue goes on.', ok: true },
  'already-paused': { text: 'The queue was already paused.', ok: false },
  resumed: { text: 'Queue resumed: its workers claim again.', ok: true },
  'not-paused': { text: 'The queue was not paused.', ok: false },
  'schedule-created': { text: 'Schedule created: every instance enqueues each of its ticks once.', ok: true },
  'schedule-changed': { text: 'Schedule changed.', ok: true },
  'schedule-removed': { text: 'Schedule removed: no instance enqueues it again.', ok: true },
  'schedule-not-found': { text: 'Nothing removed: there was no such schedule.', ok: false },
  'schedule-declared': { text: 'Nothing changed: that name belongs to a schedule declared in code, which only the code changes.', ok: false },
};

/** The page shell: header with navigation, an optional notice, the content. */
export function page(ctx: PageContext, title: string, section: Section, content: Html, notice?: { key?: string; count?: number }): Html {
  const l = ctx.links;
  const nav = (href: string, label: string, s: Section) => html`<a href="${href}"${s === section ? html` class="active" aria-current="page"` : ''}>${label}</a>`;
  const n = notice?.key ? NOTICES[notice.key] : undefined;
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · pg-queue</title>
<link rel="stylesheet" href="${l.stylesheet()}">
</head>
<body>
<header class="top">
  <a class="brand" href="${l.overview()}">pg-queue</a>
  <nav>${nav(l.overview(), 'Queues', 'queues')}${nav(l.tasks(), 'Tasks', 'tasks')}${nav(l.schedules(), 'Schedules', 'schedules')}</nav>
  ${ctx.readOnly ? html`<span class="mode">read-only</span>` : ''}
</header>
<main>
${n ? html`<p class="notice ${n.ok ? 'ok' : 'warn'}" role="status">${n.text}${notice?.key === 'retried-dead' && notice.count !== undefined ? html` ${notice.count}` : ''}</p>` : ''}
${content}
</main>
<footer>Rendered ${ctx.now.toISOString().slice(0, 19).replace('T', ' ')}Z</footer>
</body>
</html>
`;
}

/** A POST form for one action, carrying the form token; nothing when the dashboard is read-only. */
export function actionForm(ctx: PageContext, action: string, label: string, fields: Html | string = '', cls = 'btn'): Html | string {
  if (ctx.readOnly) return '';
  return html`<form method="post" action="${action}" class="inline">
<input type="hidden" name="_csrf" value="${ctx.csrfToken}">${typeof fields === 'string' ? '' : fields}
<button type="submit" class="${cls}">${label}</button>
</form>`;
}

/** A state as a coloured badge. */
export function stateBadge(state: string): Html {
  return html`<span class="badge st-${state}">${state}</span>`;
}

/** A task's tags, each a link to the tasks with that tag. */
export function tagLinks(tags: readonly string[] | null, href: (tag: string) => string): Html {
  return html`${(tags ?? []).map((tag) => html`<a class="tag" href="${href(tag)}">${truncate(tag, 40)}</a> `)}`;
}
