import type { PipelineStage, TaskDetail } from '../../sql/dashboard.repository';
import { duration, relative, timestamp } from './format';
import { html, type Html } from './html';
import { actionForm, page, stateBadge, tagLinks, type PageContext } from './layout.view';
import { pipelinePicture } from './pipeline.svg';
import type { WorkflowInfo } from '../../workflow/workflow.types';
import type { TaskLogEntry } from '../../types';
import { logPanel, progressView } from './progress.view';

/** Payloads longer than this are shown cut (the page stays light; the task keeps all of it). */
const PAYLOAD_SHOWN = 64 * 1024;

/** One task: its actions, attempts, progress, timings, last error, log, payload, and the pipeline it belongs to. */
export function taskDetailPage(
  ctx: PageContext,
  t: TaskDetail,
  stages: PipelineStage[],
  notice: { key?: string; count?: number },
  workflow?: WorkflowInfo,
  logs: TaskLogEntry[] | null = null,
): Html {
  const l = ctx.links;
  const when = (d: Date | null) => (d ? html`${timestamp(d)} <span class="rel">${relative(d, ctx.now)}</span>` : '—');
  const fact = (label: string, value: Html | string | number) => html`<dt>${label}</dt><dd>${value}</dd>`;
  const retryable = t.source === 'task' && (t.state === 'dead' || t.state === 'cancelled');
  const cancellable = t.state === 'pending' || t.state === 'running' || (t.source === 'task' && t.state === 'dead');
  const actions = ctx.readOnly
    ? ''
    : html`<section class="actions">
${retryable ? actionForm(ctx, l.action(t.id, 'retry'), 'Retry') : ''}
${cancellable && !t.cancelRequested ? actionForm(ctx, l.action(t.id, 'cancel'), 'Cancel', '', 'btn danger') : ''}
${t.state === 'pending'
    ? html`${actionForm(ctx, l.action(t.id, 'priority'), 'Set priority', html`<label>priority <input type="number" name="priority" value="${t.priority}" min="-2147483648" max="2147483647" step="1" required></label>`, 'btn ghost')}
${actionForm(ctx, l.action(t.id, 'promote'), 'Run now')}
${actionForm(ctx, l.action(t.id, 'reschedule'), 'Reschedule', html`<label>run in <input type="number" name="delaySeconds" value="3600" min="0" step="1" required> s</label>`, 'btn ghost')}`
    : ''}
</section>`;
  const ran = t.startedAt && t.finishedAt && t.finishedAt >= t.startedAt ? duration(t.finishedAt.getTime() - t.startedAt.getTime()) : '—';
  const payload = t.payload.length > PAYLOAD_SHOWN ? `${t.payload.slice(0, PAYLOAD_SHOWN)}\n… (${t.payload.length - PAYLOAD_SHOWN} more characters)` : t.payload;
  // A task that has not started (pending, or waiting for its dependencies, not a workflow under way).
  const editable = !ctx.readOnly && (t.state === 'pending' || (t.state === 'waiting' && !workflow)) && t.payload.length <= PAYLOAD_SHOWN;
  const payloadPanel = editable
    ? actionForm(ctx, l.action(t.id, 'payload'), 'Replace payload', html`<textarea name="payload" class="payload" rows="8" spellcheck="false" required>${t.payload}</textarea>`, 'btn ghost')
    : html`<pre class="payload">${payload}</pre>`;
  const content = html`<h1>Task #${t.id} <span class="queue-name">${t.queue}</span> ${stateBadge(t.state)}${t.cancelRequested ? html` <span class="badge st-cancelled">cancel requested</span>` : ''}</h1>
${actions}
<section class="panel">
<dl class="facts">
${fact('attempt', html`<strong>${t.attempt}</strong> of ${t.maxAttempts ?? 'the handler’s limit'}`)}
${t.progress !== null && t.progress !== undefined ? fact('progress', progressView(t.progress, 200)) : ''}
${fact('priority', t.priority)}
${fact('key', t.key ?? '—')}
${fact('group', t.group ? html`<a href="${l.tasks({ group: t.group, queue: t.queue })}">${t.group}</a>` : '—')}
${fact('tags', t.tags?.length ? tagLinks(t.tags, (tag) => l.tasks({ tag })) : '—')}
${fact('parent', t.parentId ? html`<a href="${l.task(t.parentId)}">#${t.parentId}</a>` : '—')}
${fact('created', when(t.createdAt))}
${fact('run at', when(t.runAt))}
${fact('started', when(t.startedAt))}
${fact('finished', when(t.finishedAt))}
${fact('last run took', ran)}
${t.lockedBy ? fact('locked by', html`${t.lockedBy}, lease until ${when(t.lockedUntil)}`) : ''}
${fact('stored in', t.source === 'task' ? 'task (live)' : 'task_archive (finished)')}
</dl>
</section>
${workflow ? journalPanel(workflow, when) : ''}
<section class="panel">
<h2>Last error</h2>
${t.lastError ? html`<pre class="error-text">${t.lastError}</pre>` : html`<p class="empty">None.</p>`}
</section>
${logPanel(logs)}
<section class="panel">
<h2>Payload</h2>
${payloadPanel}
</section>
<section class="panel">
<h2>Pipeline</h2>
${stages.length > 1
    ? html`<div class="scroll">${pipelinePicture(stages, t.id, l)}</div>`
    : html`<p class="empty">This task has no parent and enqueued no follow-ups.</p>`}
</section>`;
  return page(ctx, `Task #${t.id}`, 'tasks', content, notice);
}

/** A workflow's journal: one row per call, in call order, and what it waits for while parked. */
function journalPanel(w: WorkflowInfo, when: (d: Date | null) => Html | string): Html {
  const waits = w.waitingFor
    ? html`<p class="workflow-wait">Waiting for ${w.waitingFor.kind}${w.waitingFor.name ? html` <strong>${w.waitingFor.name}</strong>` : ''}${w.waitingFor.until ? html` until ${when(w.waitingFor.until)}` : ', no time bound'}</p>`
    : '';
  const rows = w.steps.map(
    (s) => html`<tr><td>${s.seq + 1}</td><td>${s.kind}</td><td>${s.name}</td><td>${s.timedOut ? html`${stateBadge('waiting')} timed out` : html`${stateBadge(s.outcome === 'ok' ? 'done' : s.outcome === 'error' ? 'dead' : 'waiting')} ${s.outcome}`}</td><td>${s.attempt}</td><td>${when(s.startedAt)}</td><td>${s.startedAt ? duration(s.finishedAt.getTime() - s.startedAt.getTime()) : '—'}</td></tr>`,
  );
  return html`<section class="panel workflow-journal">
<h2>Workflow journal</h2>
${waits}
${w.steps.length === 0
    ? html`<p class="empty">No call recorded yet.</p>`
    : html`<div class="scroll"><table><thead><tr><th>#</th><th>call</th><th>name</th><th>outcome</th><th>attempt</th><th>started</th><th>took</th></tr></thead><tbody>${rows}</tbody></table></div>`}
</section>`;
}
