import { Catch, HttpException, HttpStatus, Logger, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { HTML_CONTENT_TYPE, SECURITY_HEADERS } from './dashboard.headers';
import { errorPage } from './views/error.view';

/**
 * Every error of a dashboard route, a guard's refusal included, as a small HTML page that says
 * its status and nothing else: no data, no exception text (which may quote input). It replaces
 * the headers a page route had set (a JSON error under `text/html` would be a page an attacker
 * could write into). Written through Nest's HTTP adapter, so any adapter works.
 */
@Catch()
export class DashboardErrorFilter implements ExceptionFilter {
  private readonly logger = new Logger('PgQueueDashboard');

  constructor(private readonly adapterHost: HttpAdapterHost) {}

  catch(exception: unknown, host: ArgumentsHost): void {
    const adapter = this.adapterHost.httpAdapter;
    const res = host.switchToHttp().getResponse<unknown>();
    const status = exception instanceof HttpException ? exception.getStatus() : HttpStatus.INTERNAL_SERVER_ERROR;
    if (!(exception instanceof HttpException)) this.logger.error(exception instanceof Error ? (exception.stack ?? exception.message) : String(exception));
    const page = errorPage(status, TITLES[status] ?? (status >= 500 ? 'Internal Server Error' : 'Error'), status === 400 ? messageOf(exception) : undefined);
    adapter.setHeader(res, 'Content-Type', HTML_CONTENT_TYPE);
    for (const [k, v] of Object.entries(SECURITY_HEADERS)) adapter.setHeader(res, k, v);
    adapter.reply(res, page.text, status);
  }
}

const TITLES: Record<number, string> = { 400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found' };

/** A 400's reason, when it is one of the dashboard's own (they never quote input). */
function messageOf(exception: unknown): string | undefined {
  return exception instanceof BadDashboardInput ? exception.message : undefined;
}

/** Input the dashboard cannot use; its message is a fixed sentence naming the field. */
export class BadDashboardInput extends HttpException {
  constructor(field: string, expected: string) {
    super(`${field}: expected ${expected}`, HttpStatus.BAD_REQUEST);
  }
}
