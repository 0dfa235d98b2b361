import { Injectable, type INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { NonRetryableError, PgQueueDashboardModule, RateLimitedError, TaskHandler, TaskQueue, dashboardBasicAuth, type Task, type TaskContext } from '@app/pg-queue';
import { AppModule } from '../../src/app.module';
import { DashboardTokenGuard } from '../../src/dashboard/dashboard-token.guard';
import { PaymentGateway } from '../../src/payments/payment-gateway';
import { launchChromium } from '../support/browser';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

const TOKEN = 'dashboard-spec-token-0123456789';
const BASIC_PASSWORD = 'correct horse battery staple';
const XSS_PAYLOAD = '<script>alert(1)</script>';
const XSS_KEY = '"><script>alert(2)</script>';
const XSS_GROUP = "<img src=x onerror='alert(3)'>";
const XSS_ERROR = '<img src=x onerror=alert(4)>';

/** Queues of this spec, next to the example app's own: tasks that die on demand, and tasks due later. */
@Injectable()
class DashboardSpecHandlers {
  fail = true;

  @TaskHandler('dash.flaky', { maxAttempts: 1 })
  async flaky(task: Task<{ error: string }>) {
    if (this.fail) throw new NonRetryableError(task.payload.error);
  }

  @TaskHandler('dash.xss', { maxAttempts: 1 })
  async xss() {
    throw new NonRetryableError(XSS_ERROR);
  }

  @TaskHandler('dash.later')
  async later() {}

  /** Its downstream always answers 429: the queue backs off for an hour. */
  @TaskHandler('dash.throttled')
  async throttled() {
    throw new RateLimitedError({ retryAfterMs: 3_600_000, scope: 'queue', reason: 'RateLimitedError: 429 from the provider' });
  }

  /** Reports progress and logs; its first attempt fails. */
  @TaskHandler('dash.report', { backoff: { type: 'fixed', delayMs: 0 } })
  async report(task: Task, ctx: TaskContext) {
    ctx.progress({ done: 2 + task.attempt, of: 4 });
    ctx.log(`attempt ${task.attempt}: ${XSS_ERROR}`);
    if (task.attempt === 1) throw new Error('first try fails');
  }
}

/**
 * The dashboard of the example app (at /queues, behind its token guard) plus a read-only one at
 * /ro, in headless Chromium against live data: orders run through the example's pipeline while
 * the spec's own queues make dead, hostile and delayed tasks.
 */
describe('dashboard (headless Chromium)', () => {
  let db: TestDatabase;
  let app: INestApplication;
  let base: string;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let queue: TaskQueue;
  let handlers: DashboardSpecHandlers;
  const dialogs: string[] = [];
  const ids: Record<string, string> = {};
  const saved = { token: process.env.DASHBOARD_TOKEN, url: process.env.DATABASE_URL };

  const state = async (id: string) =>
    (await db.sql<{ state: string }>('SELECT state FROM pgqueue.task WHERE id = $1 UNION ALL SELECT state FROM pgqueue.task_archive WHERE id = $1', [id]))[0]?.state;
  const authed = { cookie: `pgq_dashboard=${TOKEN}` };
  const csrfOf = async (path: string) => /name="_csrf" value="([^"]+)"/.exec(await (await fetch(`${base}${path}`, { headers: authed })).text())![1];
  const post = (path: string, fields: Record<string, string>, headers: Record<string, string> = {}) =>
    fetch(`${base}${path}`, { method: 'POST', body: new URLSearchParams(fields), headers, redirect: 'manual' });

  beforeAll(async () => {
    db = await createTestDatabase();
    process.env.DATABASE_URL = db.url;
    process.env.DASHBOARD_TOKEN = TOKEN;
    const moduleRef = await Test.createTestingModule({
      imports: [
        AppModule,
        PgQueueDashboardModule.forRoot({ path: '/ro', guard: DashboardTokenGuard, readOnly: true }),
        // The README's recipe for an app without sign-in of its own: HTTP Basic auth.
        PgQueueDashboardModule.forRoot({ path: '/basic', guard: dashboardBasicAuth({ user: 'ops', password: BASIC_PASSWORD }) }),
      ],
      providers: [DashboardSpecHandlers],
    }).compile();
    app = moduleRef.createNestApplication({ logger: ['error'] });
    await app.listen(0, '127.0.0.1');
    base = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    queue = app.get(TaskQueue);
    handlers = app.get(DashboardSpecHandlers);
    Object.assign(app.get(PaymentGateway), { latencyMs: [0, 1], failureRate: 0 });

    const browserStarted = launchChromium();
    for (const customer of ['ada', 'bob', 'cy']) {
      const res = await fetch(`${base}/orders`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ customer, amountCents: 1200 }) });
      expect(res.status).toBe(201);
    }
    ids.gatewayA = await queue.enqueue('dash.flaky', { error: 'flaky: the gateway said no' });
    ids.gatewayB = await queue.enqueue('dash.flaky', { error: 'flaky: the GATEWAY said no again' });
    ids.disk = await queue.enqueue('dash.flaky', { error: 'flaky: disk full' });
    ids.xss = await queue.enqueue('dash.xss', { note: XSS_PAYLOAD }, { key: XSS_KEY, group: XSS_GROUP });
    ids.later = await queue.enqueue('dash.later', { n: 0 }, { delayMs: 3_600_000 });
    ids.cancelMe = await queue.enqueue('dash.later', { n: 1 }, { delayMs: 3_600_000 });
    ids.join = await queue.enqueue('dash.join', {}, { dependsOn: [ids.later] }); // waits for it
    await queue.enqueueMany(Array.from({ length: 58 }, (_, i) => ({ queue: 'dash.later', payload: { n: i + 2 }, options: { delayMs: 3_600_000 } })));
    await waitFor('3 orders completed and 4 tasks dead', async () => {
      const [{ completed }] = await db.sql("SELECT count(*)::int AS completed FROM orders WHERE status = 'completed'");
      const [{ dead }] = await db.sql("SELECT count(*)::int AS dead FROM pgqueue.task WHERE state = 'dead'");
      return completed === 3 && dead === 4;
    });
    browser = await browserStarted;
    context = await browser.newContext();
    page = await context.newPage();
    page.on('dialog', (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
    // The example's guard: the token once in the URL, then its cookie (each test may run alone).
    await page.goto(`${base}/queues?token=${TOKEN}`);
  });

  afterAll(async () => {
    await browser?.close();
    await app?.close();
    await db?.drop();
    process.env.DASHBOARD_TOKEN = saved.token;
    if (saved.token === undefined) delete process.env.DASHBOARD_TOKEN;
    process.env.DATABASE_URL = saved.url;
  });

  it('refuses every route without the guard\'s token: 403, no data in the body', async () => {
    for (const path of ['/queues', '/queues/tasks', `/queues/tasks/${ids.disk}`, '/queues/schedules', '/queues/assets/dashboard.css', '/ro']) {
      const res = await fetch(`${base}${path}`, { headers: { cookie: 'pgq_dashboard=wrong' } });
      const body = await res.text();
      expect({ path, status: res.status }).toEqual({ path, status: 403 });
      expect(res.headers.get('content-type')).toMatch(/^text\/html/);
      expect(body).not.toMatch(/dash\.|email\.send|order\.confirm|flaky|_csrf/);
    }
  });

  it('Basic auth: a browser given the credentials opens every page, the stylesheet and the links; without them a 401 that asks for them', async () => {
    const refused = await fetch(`${base}/basic`);
    expect({ status: refused.status, challenge: refused.headers.get('www-authenticate'), body: await refused.text() }).toEqual({
      status: 401,
      challenge: 'Basic realm="pg-queue dashboard", charset="UTF-8"',
      body: expect.not.stringMatching(/dash\.|email\.send/),
    });
    const wrong = await fetch(`${base}/basic`, { headers: { authorization: `Basic ${Buffer.from('ops:nope').toString('base64')}` } });
    expect(wrong.status).toBe(401);
    const withCredentials = await browser.newContext({ httpCredentials: { username: 'ops', password: BASIC_PASSWORD } });
    try {
      const p = await withCredentials.newPage();
      expect((await p.goto(`${base}/basic`))!.status()).toBe(200);
      expect(await p.evaluate('getComputedStyle(document.querySelector(".top")).backgroundColor')).toBe('rgb(29, 35, 48)');
      await p.locator('a', { hasText: 'dash.flaky' }).first().click();
      await p.waitForURL(/\/basic\/tasks\?queue=dash\.flaky/);
      expect(await p.locator('table.tasks tbody tr').count()).toBe(3);
    } finally {
      await withCredentials.close();
    }
  });

  it("the example guard's cookie is Secure when the request came over HTTPS (a TLS proxy's X-Forwarded-Proto)", async () => {
    const cookieOf = async (headers: Record<string, string>) => (await fetch(`${base}/queues?token=${TOKEN}`, { headers })).headers.get('set-cookie') ?? '';
    expect(await cookieOf({ 'x-forwarded-proto': 'https' })).toMatch(/; Secure(;|$)/);
    expect(await cookieOf({})).not.toMatch(/Secure/);
  });

  it('overview: counts by state per queue, the last hour per minute, oldest due, run-time percentiles', async () => {
    const res = await page.goto(`${base}/queues?token=${TOKEN}`);
    expect(res!.status()).toBe(200);
    const headers = res!.headers();
    expect(headers['content-security-policy']).toContain("default-src 'none'");
    expect(headers['content-security-policy']).toContain("frame-ancestors 'none'");
    expect(await page.locator('h1').textContent()).toBe('Queues');
    const row = (queueName: string) => page.locator('tbody tr', { has: page.locator(`th a:text-is("${queueName}")`) }).locator('td');
    expect((await row('dash.flaky').allTextContents())[4]).toBe('3'); // dead
    expect((await row('dash.later').allTextContents())[1]).toBe('60'); // later
    expect((await row('dash.later').allTextContents())[9]).toBe('1'); // handlers: this app's instance
    expect((await row('dash.join').allTextContents())[2]).toBe('1'); // waiting for its dependency
    const email = await row('email.send').allTextContents();
    expect(email[5]).toBe('3'); // done in the last hour
    expect(email[10]).toMatch(/ms|s$/); // p50
    expect(email[11]).toMatch(/ms|s$/); // p95
    expect(await page.locator('svg.chart rect.done').count()).toBeGreaterThan(0);
    expect(await page.locator('svg.chart rect.failed').count()).toBeGreaterThan(0);
    // The stylesheet came from the dashboard itself, under its CSP.
    expect(await page.evaluate('getComputedStyle(document.querySelector(".top")).backgroundColor')).toBe('rgb(29, 35, 48)');
  });

  it('task list: filters by queue, state, key, group and error text; pages by cursor', async () => {
    await page.goto(`${base}/queues/tasks?queue=email.send`);
    expect(await page.locator('table.tasks tbody tr').count()).toBe(3);
    await page.goto(`${base}/queues/tasks`);
    await page.locator('select[name=state]').selectOption('dead');
    await page.locator('input[name=error]').fill('GATEWAY SAID');
    await page.locator('form.filters button[type=submit]').click();
    await page.waitForURL(/state=dead/);
    const shown = await page.locator('table.tasks tbody tr td:first-child').allTextContents();
    expect(shown.sort()).toEqual([`#${ids.gatewayA}`, `#${ids.gatewayB}`].sort());
    await page.goto(`${base}/queues/tasks?key=${encodeURIComponent(XSS_KEY)}`);
    expect(await page.locator('table.tasks tbody tr td:first-child').allTextContents()).toEqual([`#${ids.xss}`]);
    await page.goto(`${base}/queues/tasks?group=${encodeURIComponent(XSS_GROUP)}`);
    expect(await page.locator('table.tasks tbody tr td:first-child').allTextContents()).toEqual([`#${ids.xss}`]);

    await page.goto(`${base}/queues/tasks?queue=dash.later`);
    expect(await page.locator('table.tasks tbody tr').count()).toBe(50);
    await page.locator('a[rel=next]').click();
    await page.waitForURL(/cursor=/);
    const rest = await page.locator('table.tasks tbody tr td:first-child').allTextContents();
    expect(rest).toHaveLength(10);
    expect(rest).toContain(`#${ids.later}`);
    expect(await page.locator('a[rel=next]').count()).toBe(0);
  });

  it('tags: shown in the list and on the task page, each a link that filters the list by it; a hostile tag is text', async () => {
    const hostile = '<b onmouseover=alert(5)>vip</b>';
    const tagged = await queue.enqueue('dash.tagged', { n: 1 }, { delayMs: 3_600_000, tags: ['tenant:acme', 'vip'] });
    const other = await queue.enqueue('dash.tagged', { n: 2 }, { delayMs: 3_600_000, tags: ['tenant:globex', hostile] });
    await queue.enqueue('dash.tagged', { n: 3 }, { delayMs: 3_600_000 });
    await page.goto(`${base}/queues/tasks?queue=dash.tagged`);
    expect(await page.locator('table.tasks tbody tr').count()).toBe(3);
    await page.locator('input[name=tag]').fill('vip');
    await page.locator('form.filters button[type=submit]').click();
    await page.waitForURL(/tag=vip/);
    expect(await page.locator('table.tasks tbody tr td:first-child').allTextContents()).toEqual([`#${tagged}`]);
    await page.locator('table.tasks tbody tr td.tags a.tag', { hasText: 'tenant:acme' }).click();
    await page.waitForURL(/tag=tenant%3Aacme/);
    expect(await page.locator('table.tasks tbody tr td:first-child').allTextContents()).toEqual([`#${tagged}`]);
    await page.goto(`${base}/queues/tasks/${other}`);
    expect(await page.locator('dl.facts a.tag').allTextContents()).toEqual(['tenant:globex', hostile]);
    expect(await page.locator('dl.facts b').count()).toBe(0);
    await page.locator('dl.facts a.tag', { hasText: hostile }).click();
    await page.waitForURL(/tag=/);
    expect(await page.locator('table.tasks tbody tr td:first-child').allTextContents()).toEqual([`#${other}`]);
    expect(dialogs).toEqual([]);
  });

  it('task detail: payload, attempt of max, last error, timings, and the pipeline as boxes with arrows', async () => {
    const [{ id }] = await db.sql("SELECT id::text FROM pgqueue.task_archive WHERE queue = 'payment.capture' ORDER BY id LIMIT 1");
    await page.goto(`${base}/queues/tasks/${id}`);
    expect(await page.locator('h1 .badge').textContent()).toBe('done');
    expect(await page.locator('pre.payload').textContent()).toContain('"orderId"');
    const facts = await page.locator('dl.facts').textContent();
    expect(facts).toMatch(/attempt\s*1 of 8/);
    for (const label of ['created', 'run at', 'started', 'finished']) expect(facts).toMatch(new RegExp(`${label}\\s*\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\dZ`));
    const nodes = page.locator('svg.pipeline a.node');
    expect(await nodes.count()).toBe(3);
    expect(await page.locator('svg.pipeline path.edge').count()).toBe(2);
    expect(await page.locator('svg.pipeline a.node.current text.q').textContent()).toBe('payment.capture');
    expect(await nodes.locator('text.q').allTextContents()).toEqual(['order.confirm', 'payment.capture', 'email.send']);
    await nodes.nth(2).click(); // a box links to its task
    await page.waitForURL(/\/tasks\/\d+$/);
    expect(await page.locator('h1 .queue-name').textContent()).toBe('email.send');

    await page.goto(`${base}/queues/tasks/${ids.disk}`);
    expect(await page.locator('pre.error-text').textContent()).toContain('flaky: disk full');
    expect(await page.locator('dl.facts').textContent()).toMatch(/attempt\s*1 of 1/);
  });

  it('retry on a dead task: it runs again and ends done', async () => {
    handlers.fail = false;
    await page.goto(`${base}/queues/tasks/${ids.disk}`);
    expect(await page.locator('h1 .badge').textContent()).toBe('dead');
    await page.locator('form[action$="/retry"] button').click();
    await page.waitForURL(/notice=retried/);
    expect(await page.locator('.notice').textContent()).toContain('pending again');
    await waitFor('the retried task to end done', async () => {
      await page.reload();
      return (await page.locator('h1 .badge').first().textContent()) === 'done';
    });
    expect(await state(ids.disk)).toBe('done');
  });

  it('retry dead by error text, cancel and set priority, from the pages', async () => {
    await page.goto(`${base}/queues/tasks?queue=dash.flaky&state=dead`);
    await page.locator('section.bulk input[name=error]').fill('gateway said');
    await page.locator('section.bulk button').click();
    await page.waitForURL(/notice=retried-dead/);
    expect(await page.locator('.notice').textContent()).toMatch(/Dead tasks retried:\s*2/);
    await waitFor('both gateway tasks done', async () => (await state(ids.gatewayA)) === 'done' && (await state(ids.gatewayB)) === 'done');

    await page.goto(`${base}/queues/tasks/${ids.later}`);
    await page.locator('input[name=priority]').fill('-7');
    await page.locator('form[action$="/priority"] button').click();
    await page.waitForURL(/notice=priority-set/);
    expect(await db.sql('SELECT priority FROM pgqueue.task WHERE id = $1', [ids.later])).toEqual([{ priority: -7 }]);

    await page.goto(`${base}/queues/tasks/${ids.cancelMe}`);
    await page.locator('form[action$="/cancel"] button').click();
    await page.waitForURL(/notice=cancelled/);
    expect(await page.locator('h1 .badge').first().textContent()).toBe('cancelled');
    expect(await state(ids.cancelMe)).toBe('cancelled');
  });

  it("pause and resume a queue from the overview's button (issue 27): a badge while paused, nothing in read-only mode", async () => {
    const row = () => page.locator('tbody tr', { has: page.locator('th a:text-is("dash.later")') });
    await page.goto(`${base}/queues`);
    await row().locator('form[action$="/pause"] button').click();
    await page.waitForURL(/notice=paused/);
    expect(await page.locator('.notice').textContent()).toContain('Queue paused');
    expect(await row().locator('th .badge').textContent()).toBe('paused');
    expect(await queue.pausedQueues()).toEqual([expect.objectContaining({ queue: 'dash.later', partition: null })]);
    await page.goto(`${base}/ro`);
    expect(await row().locator('th .badge').textContent()).toBe('paused');
    expect(await page.locator('form[method=post]').count()).toBe(0);
    await page.goto(`${base}/queues`);
    await row().locator('form[action$="/resume"] button').click();
    await page.waitForURL(/notice=resumed/);
    expect(await row().locator('th .badge').count()).toBe(0);
    expect(await queue.pausedQueues()).toEqual([]);
  });

  it('back-offs and limiter budgets (issue 28): a badge on the backed-off queue, and the flow-control panel with ends and budgets', async () => {
    await queue.enqueue('dash.throttled', {});
    const until = await waitFor('dash.throttled backed off', async () => (await queue.backOffs()).find((b) => b.name === 'dash.throttled')?.until);
    for (const path of ['/queues', '/ro']) {
      await page.goto(`${base}${path}`);
      const row = page.locator('tbody tr', { has: page.locator('th a:text-is("dash.throttled")') });
      expect(await row.locator('th .badge.st-cooldown').textContent()).toMatch(/^cooldown ends in (59 min|1 h)/);
      const backOff = page.locator('.flow table.cooldowns tbody tr', { has: page.locator('th:text-is("dash.throttled")') });
      expect(await backOff.locator('td').allTextContents()).toEqual([
        'queue',
        '',
        expect.stringContaining(until.toISOString().slice(0, 19).replace('T', ' ')),
        'RateLimitedError: 429 from the provider',
      ]);
      // The example app's payment limiter: its budget and what is in use (nothing runs now).
      const gateway = page.locator('.flow table.limiters tbody tr', { has: page.locator('th:text-is("gateway")') });
      expect(await gateway.locator('td').allTextContents()).toEqual(['0 / 40', '—', '']);
    }
    // Nothing was counted: the task waits, pending, at its first attempt.
    expect(await db.sql("SELECT state, attempt, last_error FROM pgqueue.task WHERE queue = 'dash.throttled'")).toEqual([{ state: 'pending', attempt: 0, last_error: null }]);
  });

  it('progress as a bar in the task list and on the task page, and the task log with each failed attempt (issue 27)', async () => {
    const id = await queue.enqueue('dash.report', {});
    await waitFor('dash.report done', async () => (await state(id)) === 'done');
    await page.goto(`${base}/queues/tasks?queue=dash.report`);
    const bar = page.locator('table.tasks tbody tr').first().locator('progress');
    expect({ value: await bar.getAttribute('value'), max: await bar.getAttribute('max') }).toEqual({ value: '4', max: '4' });
    expect(await page.locator('table.tasks tbody tr .progress-text').first().textContent()).toBe('4/4');
    await page.goto(`${base}/queues/tasks/${id}`);
    expect(await page.locator('dl.facts progress').getAttribute('value')).toBe('4');
    const entries = page.locator('.task-log tbody tr');
    expect(await entries.count()).toBe(3);
    expect(await entries.nth(0).textContent()).toContain(`attempt 1: ${XSS_ERROR}`); // as text, not markup
    expect(await entries.nth(1).locator('pre.log-error').textContent()).toContain('first try fails');
    expect(await entries.nth(1).textContent()).toMatch(/failed after \d+ ms/);
    expect(await entries.nth(2).textContent()).toContain('attempt 2:');
    expect(await page.locator('.task-log img').count()).toBe(0);
    await page.goto(`${base}/ro/tasks/${id}`); // read-only shows the same
    expect(await page.locator('.task-log tbody tr').count()).toBe(3);
  });

  it('replace the payload, reschedule and run now from a pending task\'s page (issue 27); refused with the reason once it ran; nothing in read-only mode', async () => {
    const id = await queue.enqueue('dash.later', { n: 100 }, { delayMs: 3_600_000 });
    await page.goto(`${base}/queues/tasks/${id}`);
    await page.locator('textarea[name=payload]').fill('{"n": 101, "note": "edited"}');
    await page.locator('form[action$="/payload"] button').click();
    await page.waitForURL(/notice=payload-updated/);
    expect(await db.sql('SELECT payload FROM pgqueue.task WHERE id = $1', [id])).toEqual([{ payload: { n: 101, note: 'edited' } }]);

    await page.locator('input[name=delaySeconds]').fill('7200');
    await page.locator('form[action$="/reschedule"] button').click();
    await page.waitForURL(/notice=rescheduled/);
    const [{ ahead }] = await db.sql<{ ahead: number }>('SELECT extract(epoch FROM run_at - now())::int AS ahead FROM pgqueue.task WHERE id = $1', [id]);
    expect(ahead).toBeGreaterThan(3600);

    // The read-only dashboard shows the pending task without any of these forms, and refuses their POSTs.
    await page.goto(`${base}/ro/tasks/${id}`);
    expect(await page.locator('form[method=post], textarea').count()).toBe(0);
    const token = await csrfOf(`/queues/tasks/${id}`);
    for (const [action, fields] of [['promote', {}], ['reschedule', { delaySeconds: '0' }], ['payload', { payload: '{}' }]] as const) {
      expect((await post(`/ro/tasks/${id}/${action}`, { _csrf: token, ...fields }, authed)).status).toBe(403);
      expect((await post(`/queues/tasks/${id}/${action}`, fields, authed)).status).toBe(403); // no form token
    }

    await page.goto(`${base}/queues/tasks/${id}`);
    await page.locator('form[action$="/promote"] button').click();
    await page.waitForURL(/notice=promoted/);
    await waitFor('the promoted task to run', async () => (await state(id)) === 'done');
    // A stale page's form, posted after the task ran: refused, and the page says why.
    const refused = await post(`/queues/tasks/${id}/payload`, { _csrf: token, payload: '{"n": 102}' }, authed);
    expect({ status: refused.status, location: refused.headers.get('location') }).toEqual({ status: 303, location: expect.stringContaining('notice=not-changed-finished') });
    await page.goto(`${base}${new URL(refused.headers.get('location')!, base).pathname}?notice=not-changed-finished`);
    expect(await page.locator('.notice').textContent()).toContain('the task has finished');
    expect(await page.locator('form[action$="/promote"], textarea').count()).toBe(0);
  });

  it('retry never revives a join its dead parent cancelled: "Retry dead tasks" skips it, its own Retry says why', async () => {
    const join = await queue.enqueue('dash.join', {}, { dependsOn: [ids.xss] }); // xss is dead: cancelled at once
    expect(await state(join)).toBe('cancelled');
    await page.goto(`${base}/queues/tasks?queue=dash.join`);
    await page.locator('section.bulk button').click();
    await page.waitForURL(/notice=retried-dead/);
    expect(await page.locator('.notice').textContent()).toMatch(/Dead tasks retried:\s*0/);
    await page.goto(`${base}/queues/tasks/${join}`);
    await page.locator('form[action$="/retry"] button').click();
    await page.waitForURL(/notice=not-retried-dependencies/);
    expect(await page.locator('.notice').textContent()).toContain('Enqueue a new task with the same dependencies instead.');
    expect(await state(join)).toBe('cancelled');
  });

  it('renders hostile payloads, keys, groups and errors as text: no dialog, no injected element', async () => {
    await page.goto(`${base}/queues/tasks/${ids.xss}`);
    expect(await page.locator('pre.payload').textContent()).toContain(XSS_PAYLOAD);
    expect(await page.locator('pre.error-text').textContent()).toContain(XSS_ERROR);
    expect(await page.locator('dl.facts').textContent()).toContain(XSS_KEY);
    expect(await page.locator('dl.facts').textContent()).toContain(XSS_GROUP);
    await page.goto(`${base}/queues/tasks?queue=dash.xss`);
    expect(await page.locator('td.error').textContent()).toContain(XSS_ERROR);
    expect(await page.locator('table.tasks').textContent()).toContain(XSS_KEY);
    for (const path of [`/queues/tasks/${ids.xss}`, '/queues/tasks?queue=dash.xss', `/queues/tasks?error=${encodeURIComponent('"><b id=x>')}`]) {
      await page.goto(`${base}${path}`);
      expect(await page.locator('script, img, b#x').count()).toBe(0);
    }
    expect(await page.locator('input[name=error]').inputValue()).toBe('"><b id=x>');
    expect(dialogs).toEqual([]);
  });

  it('an action needs the guard, the form token and a same-origin request: otherwise 403 and nothing changes', async () => {
    const retry = `/queues/tasks/${ids.xss}/retry`;
    const before = await db.sql('SELECT state, attempt, finished_at FROM pgqueue.task WHERE id = $1', [ids.xss]);
    const token = await csrfOf(`/queues/tasks/${ids.xss}`);
    expect((await post(retry, { _csrf: token })).status).toBe(403); // no guard credentials
    expect((await post(retry, { _csrf: token }, { cookie: 'pgq_dashboard=wrong' })).status).toBe(403);
    expect((await post(retry, { _csrf: 'x'.repeat(token.length) }, authed)).status).toBe(403); // wrong token
    expect((await post(retry, {}, authed)).status).toBe(403); // no token
    expect((await post(retry, { _csrf: token }, { ...authed, origin: 'http://evil.example' })).status).toBe(403);
    expect((await post(retry, { _csrf: token }, { ...authed, 'sec-fetch-site': 'cross-site' })).status).toBe(403);

    // A page of another origin that knows the token posts through the user's browser (cookie sent: same site).
    const attacker = http.createServer((_req, res) => {
      res.setHeader('content-type', 'text/html');
      res.end(`<form id="f" method="post" action="${base}${retry}"><input name="_csrf" value="${token}"></form><script>document.getElementById('f').submit()</script>`);
    });
    await new Promise<void>((resolve) => attacker.listen(0, '127.0.0.1', resolve));
    try {
      const refused = page.waitForResponse((r) => r.url().endsWith(retry));
      await page.goto(`http://127.0.0.1:${(attacker.address() as AddressInfo).port}/`);
      expect((await refused).status()).toBe(403);
    } finally {
      await new Promise((resolve) => attacker.close(resolve));
    }
    expect(await db.sql('SELECT state, attempt, finished_at FROM pgqueue.task WHERE id = $1', [ids.xss])).toEqual(before);
    // The same POST with the token, from the page itself, works (the xss task is retried and dies again).
    expect((await post(retry, { _csrf: token }, authed)).status).toBe(303);
  });

  it('read-only: no action buttons, and action POSTs are refused', async () => {
    await page.goto(`${base}/ro/tasks/${ids.xss}`);
    expect(await page.locator('.mode').textContent()).toBe('read-only');
    expect(await page.locator('h1').textContent()).toContain(`Task #${ids.xss}`);
    expect(await page.locator('form[method=post], button').count()).toBe(0);
    await page.goto(`${base}/ro/tasks?queue=dash.later`);
    expect(await page.locator('form[method=post]').count()).toBe(0);
    const token = await csrfOf(`/queues/tasks/${ids.later}`);
    const res = await post(`/ro/tasks/${ids.later}/priority`, { _csrf: token, priority: '5' }, authed);
    expect(res.status).toBe(403);
    expect(await db.sql('SELECT priority FROM pgqueue.task WHERE id = $1', [ids.later])).toEqual([{ priority: -7 }]);
  });

  it('schedules (issue 27): create a runtime schedule from the form, edit and remove it; a declared one has no buttons; nothing of it in read-only mode', async () => {
    const row = (name: string) => page.locator('tbody tr', { has: page.locator(`th:text-is("${name}")`) });
    await page.goto(`${base}/queues/schedules`);
    expect(await row('reports.hourly').locator('form, a:text-is("Edit")').count()).toBe(0); // declared in code
    const form = page.locator('form.schedule-form');
    await form.locator('input[name=name]').fill('dash.pulse');
    await form.locator('input[name=queue]').fill('dash.later');
    await form.locator('input[name=cron]').fill('*/5 * * * *');
    await form.locator('input[name=timezone]').fill('Europe/Berlin');
    await form.locator('textarea[name=payload]').fill('{"n": -1, "note": "from the dashboard"}');
    await form.locator('button').click();
    await page.waitForURL(/notice=schedule-created/);
    expect(await page.locator('.notice').textContent()).toContain('Schedule created');
    expect(await row('dash.pulse').locator('td').nth(1).textContent()).toMatch(/^\*\/5 \* \* \* \*\s+Europe\/Berlin$/);
    expect(await queue.getSchedule('dash.pulse')).toMatchObject({ queue: 'dash.later', cron: '*/5 * * * *', timezone: 'Europe/Berlin', payload: { n: -1, note: 'from the dashboard' }, declared: false });

    // Edit: the form comes back filled in; the new interval replaces the cron.
    await row('dash.pulse').locator('a:text-is("Edit")').click();
    await page.waitForURL(/edit=dash\.pulse/);
    expect(await form.locator('textarea[name=payload]').inputValue()).toBe('{"n":-1,"note":"from the dashboard"}');
    await form.locator('input[name=cron]').fill('');
    await form.locator('input[name=timezone]').fill('');
    await form.locator('input[name=everyMs]').fill('3600000');
    await form.locator('button').click();
    await page.waitForURL(/notice=schedule-changed/);
    expect(await row('dash.pulse').locator('td').nth(1).textContent()).toMatch(/^every 1 h\b/);
    expect(await queue.getSchedule('dash.pulse')).toMatchObject({ cron: null, everyMs: 3_600_000, timezone: null });

    // A bad cron is a 400 naming the field, and nothing changes.
    const token = await csrfOf('/queues/schedules');
    const bad = await post('/queues/schedules/upsert', { _csrf: token, name: 'dash.bad', queue: 'dash.later', cron: '61 * * * *' }, authed);
    expect(bad.status).toBe(400);
    expect(await bad.text()).toContain('cron: expected a cron expression');
    expect(await queue.getSchedule('dash.bad')).toBeNull();
    // The name of a declared schedule is refused with a notice.
    expect((await post('/queues/schedules/upsert', { _csrf: token, name: 'reports.hourly', queue: 'dash.later', everyMs: '60000' }, authed)).headers.get('location')).toMatch(/notice=schedule-declared/);

    // Read-only: listed, no form, no button, and the actions are refused.
    await page.goto(`${base}/ro/schedules`);
    expect(await row('dash.pulse').count()).toBe(1);
    expect(await page.locator('form, a:text-is("Edit")').count()).toBe(0);
    expect((await post('/ro/schedules/remove', { _csrf: token, name: 'dash.pulse' }, authed)).status).toBe(403);
    expect((await post('/ro/schedules/upsert', { _csrf: token, name: 'dash.ro', queue: 'dash.later', everyMs: '60000' }, authed)).status).toBe(403);
    // Without the form token: 403.
    expect((await post('/queues/schedules/remove', { name: 'dash.pulse' }, authed)).status).toBe(403);
    expect(await queue.getSchedule('dash.pulse')).not.toBeNull();

    await page.goto(`${base}/queues/schedules`);
    await row('dash.pulse').locator('form[action$="/schedules/remove"] button').click();
    await page.waitForURL(/notice=schedule-removed/);
    expect(await row('dash.pulse').count()).toBe(0);
    expect(await queue.getSchedule('dash.pulse')).toBeNull();
    expect(dialogs).toEqual([]);
  });

  it('schedules: name, queue, cron, next tick, last run', async () => {
    await page.goto(`${base}/queues/schedules`);
    const row = await page.locator('tbody tr', { hasText: 'reports.hourly' }).locator('th, td').allTextContents();
    expect(row[0]).toBe('reports.hourly');
    expect(row[1]).toBe('reports.hourly');
    expect(row[2]).toMatch(/^0 \* \* \* \*\s+UTC$/);
    expect(row[4]).toMatch(/^\d{4}-\d\d-\d\d \d\d:00:00Z\s+in /);
    expect(dialogs).toEqual([]);
  });
});
