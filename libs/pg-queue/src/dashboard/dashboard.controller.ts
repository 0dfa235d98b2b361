import { Body, Controller, Get, Inject, NotFoundException, Param, Post, Query, Redirect, Req, UseFilters, UseGuards, type Type } from '@nestjs/common';
import type { TaskQueue } from '../client/task-queue.service';
import { DependenciesNotDoneError, ScheduleNameTakenError } from '../errors';
import { DASHBOARD_CSS } from './assets/dashboard.css';
import { DashboardActionGuard } from './dashboard.csrf';
import { DashboardData } from './dashboard.data';
import { BadDashboardInput, DashboardErrorFilter } from './dashboard.filter';
import { DashboardAccessGuard } from './dashboard.guard';
import { HtmlPage, Stylesheet } from './dashboard.headers';
import { containsPattern, delayField, listFilter, noticeParams, payloadField, priorityField, queueName, taskIdParam, text } from './dashboard.input';
import type { TaskChangeResult } from '../client/task-changes';
import type { ResolvedDashboardOptions } from './dashboard.options';
import { basePath, type DashboardRequest } from './dashboard.request';
import { DASHBOARD_OPTIONS } from './dashboard.tokens';
import { scheduleForm, scheduleInputError, scheduleNameField } from './schedule.input';
import type { PageContext } from './views/layout.view';
import { Links } from './views/links';
import { overviewPage } from './views/overview.view';
import { schedulesPage } from './views/schedules.view';
import { taskDetailPage } from './views/task-detail.view';
import { taskListPage } from './views/task-list.view';

type Fields = Record<string, unknown>;
type Redirection = { url: string; statusCode: number };

/**
 * The dashboard's routes, relative to its path: GET pages (overview, tasks, one task, schedules)
 * and the stylesheet, POST actions that answer with a 303 back to a page (post/redirect/get).
 * Every route is behind the access guard (the user's guard); every action also behind the action
 * guard (read-only, cross-site and form-token checks). Reads go through DashboardData (the
 * dashboard's own statements); actions through TaskQueue, where their rules live.
 *
 * Routes are mounted by `dashboardControllerAt(path)`, which gives each module its own subclass
 * with its own `@Controller(path)`.
 */
@UseGuards(DashboardAccessGuard)
@UseFilters(DashboardErrorFilter)
export abstract class DashboardController {
  /** The configured path: the base of links when the request's own path cannot be used. */
  protected abstract readonly mountPath: string;

  constructor(
    private readonly data: DashboardData,
    @Inject(DASHBOARD_OPTIONS) private readonly options: ResolvedDashboardOptions,
  ) {}

  /** The TaskQueue of the registration the dashboard shows. */
  private get queue(): TaskQueue {
    return this.data.queue;
  }

  @Get()
  @HtmlPage()
  async overview(@Req() req: DashboardRequest, @Query() query: Fields): Promise<string> {
    const overview = await this.data.overview();
    return overviewPage(this.context(req, 0), overview, noticeParams(query)).text;
  }

  @Get('tasks')
  @HtmlPage()
  async tasks(@Req() req: DashboardRequest, @Query() query: Fields): Promise<string> {
    const filter = listFilter(query);
    return taskListPage(this.context(req, 1), filter, await this.data.tasks(filter), noticeParams(query)).text;
  }

  @Get('tasks/:id')
  @HtmlPage()
  async task(@Req() req: DashboardRequest, @Param('id') id: string, @Query() query: Fields): Promise<string> {
    const task = await this.data.task(taskIdParam(id));
    if (!task) throw new NotFoundException();
    const [stages, workflow, logs] = await Promise.all([this.data.pipeline(task.id), this.data.workflow(task.id), this.data.logs(task.id)]);
    return taskDetailPage(this.context(req, 2), task, stages, noticeParams(query), workflow, logs).text;
  }

  @Get('schedules')
  @HtmlPage()
  async schedules(@Req() req: DashboardRequest, @Query() query: Fields): Promise<string> {
    // ?edit=<name>: the form filled in with that runtime schedule (a declared or unknown one: an empty form).
    const edit = this.options.readOnly ? null : scheduleNameField(query, 'edit');
    const editing = edit === null ? null : await this.queue.getSchedule(edit);
    return schedulesPage(this.context(req, 1), await this.data.schedules(), noticeParams(query), editing?.declared === false ? editing : null).text;
  }

  @Get('assets/dashboard.css')
  @Stylesheet()
  stylesheet(): string {
    return DASHBOARD_CSS;
  }

  /** A dead or cancelled task back to pending, attempts reset (not a dependant cancelled by its parent). */
  @Post('tasks/:id/retry')
  @UseGuards(DashboardActionGuard)
  @Redirect()
  async retry(@Req() req: DashboardRequest, @Param('id') id: string): Promise<Redirection> {
    const notice = await this.queue.retry(taskIdParam(id)).then(
      (retried) => (retried ? 'retried' : 'not-retried'),
      (err: unknown) => {
        if (err instanceof DependenciesNotDoneError) return 'not-retried-dependencies';
        throw err;
      },
    );
    return this.backTo(req, 3, (l) => l.task(id, { notice }));
  }

  /** Cancels a pending or dead task, or asks a running one to stop. */
  @Post('tasks/:id/cancel')
  @UseGuards(DashboardActionGuard)
  @Redirect()
  async cancel(@Req() req: DashboardRequest, @Param('id') id: string): Promise<Redirection> {
    const result = await this.queue.cancel(taskIdParam(id));
    const notice = result === 'cancelled' ? 'cancelled' : result === 'requested' ? 'cancel-requested' : 'not-cancellable';
    return this.backTo(req, 3, (l) => l.task(id, { notice }));
  }

  /** A pending task's new priority (lower runs first). */
  @Post('tasks/:id/priority')
  @UseGuards(DashboardActionGuard)
  @Redirect()
  async priority(@Req() req: DashboardRequest, @Param('id') id: string, @Body() body: Fields): Promise<Redirection> {
    const moved = await this.queue.setPriority(taskIdParam(id), priorityField(body));
    return this.backTo(req, 3, (l) => l.task(id, { notice: moved ? 'priority-set' : 'priority-not-set' }));
  }

  /** Runs a pending task now (TaskQueue.promote). */
  @Post('tasks/:id/promote')
  @UseGuards(DashboardActionGuard)
  @Redirect()
  async promote(@Req() req: DashboardRequest, @Param('id') id: string): Promise<Redirection> {
    return this.changed(req, id, 'promoted', await this.queue.promote(taskIdParam(id)));
  }

  /** Moves a pending task's due time to `delaySeconds` from now (TaskQueue.reschedule). */
  @Post('tasks/:id/reschedule')
  @UseGuards(DashboardActionGuard)
  @Redirect()
  async reschedule(@Req() req: DashboardRequest, @Param('id') id: string, @Body() body: Fields): Promise<Redirection> {
    return this.changed(req, id, 'rescheduled', await this.queue.reschedule(taskIdParam(id), { delayMs: delayField(body) }));
  }

  /** Replaces the payload of a task that has not started (TaskQueue.updatePayload). */
  @Post('tasks/:id/payload')
  @UseGuards(DashboardActionGuard)
  @Redirect()
  async payload(@Req() req: DashboardRequest, @Param('id') id: string, @Body() body: Fields): Promise<Redirection> {
    return this.changed(req, id, 'payload-updated', await this.queue.updatePayload(taskIdParam(id), payloadField(body)));
  }

  /** Every dead task of a queue whose last error contains the text, back to pending (cancelled ones stay). */
  @Post('retry-dead')
  @UseGuards(DashboardActionGuard)
  @Redirect()
  async retryDead(@Req() req: DashboardRequest, @Body() body: Fields): Promise<Redirection> {
    const queue = queueName(body, 'queue', true);
    const error = text(body, 'error');
    const ids = await this.queue.retryDead({ queue, errorLike: error === null ? undefined : containsPattern(error) });
    return this.backTo(req, 1, (l) => l.tasks({ queue, error, notice: 'retried-dead', n: String(ids.length) }));
  }

  /** Pauses a queue on every instance (TaskQueue.pause): nothing of it is claimed until resumed. */
  @Post('pause')
  @UseGuards(DashboardActionGuard)
  @Redirect()
  async pause(@Req() req: DashboardRequest, @Body() body: Fields): Promise<Redirection> {
    const paused = await this.queue.pause(queueName(body, 'queue', true));
    return this.backTo(req, 1, (l) => `${l.overview()}?notice=${paused ? 'paused' : 'already-paused'}`);
  }

  /** Resumes a paused queue: its workers on every instance are woken and claim again. */
  @Post('resume')
  @UseGuards(DashboardActionGuard)
  @Redirect()
  async resume(@Req() req: DashboardRequest, @Body() body: Fields): Promise<Redirection> {
    const resumed = await this.queue.resume(queueName(body, 'queue', true));
    return this.backTo(req, 1, (l) => `${l.overview()}?notice=${resumed ? 'resumed' : 'not-paused'}`);
  }

  /** Creates or changes a runtime schedule (TaskQueue.upsertSchedule, its rules); a declared name is refused. */
  @Post('schedules/upsert')
  @UseGuards(DashboardActionGuard)
  @Redirect()
  async upsertSchedule(@Req() req: DashboardRequest, @Body() body: Fields): Promise<Redirection> {
    const { name, options } = scheduleForm(body);
    const notice = await this.queue.upsertSchedule(name, options).then(
      (created) => (created ? 'schedule-created' : 'schedule-changed'),
      (err: unknown) => {
        if (err instanceof ScheduleNameTakenError) return 'schedule-declared';
        throw scheduleInputError(err);
      },
    );
    return this.backTo(req, 2, (l) => l.schedules({ notice }));
  }

  /** Removes a runtime schedule on every instance. */
  @Post('schedules/remove')
  @UseGuards(DashboardActionGuard)
  @Redirect()
  async removeSchedule(@Req() req: DashboardRequest, @Body() body: Fields): Promise<Redirection> {
    const name = scheduleNameField(body, 'name');
    if (name === null) throw new BadDashboardInput('name', 'a schedule name');
    const notice = await this.queue.removeSchedule(name).then(
      (removed) => (removed ? 'schedule-removed' : 'schedule-not-found'),
      (err: unknown) => {
        if (err instanceof ScheduleNameTakenError) return 'schedule-declared';
        throw err;
      },
    );
    return this.backTo(req, 2, (l) => l.schedules({ notice }));
  }

  private context(req: DashboardRequest, depth: number): PageContext {
    return {
      links: new Links(basePath(req, depth, this.mountPath)),
      readOnly: this.options.readOnly,
      csrfToken: this.options.csrfToken,
      now: new Date(),
    };
  }

  /** Back to the task's page, saying what a change did or why it did not. */
  private changed(req: DashboardRequest, id: string, done: string, result: TaskChangeResult): Redirection {
    return this.backTo(req, 3, (l) => l.task(id, { notice: result === 'changed' ? done : `not-changed-${result}` }));
  }

  /** 303 See Other: the browser GETs the page, so a reload does not repeat the action. */
  private backTo(req: DashboardRequest, depth: number, to: (links: Links) => string): Redirection {
    return { url: to(new Links(basePath(req, depth, this.mountPath))), statusCode: 303 };
  }
}

/** The dashboard's controller class mounted at `path` (one class per module, so two dashboards can coexist). */
export function dashboardControllerAt(path: string): Type<DashboardController> {
  @Controller(path)
  class PgQueueDashboardController extends DashboardController {
    protected override readonly mountPath = path;
  }
  return PgQueueDashboardController;
}
