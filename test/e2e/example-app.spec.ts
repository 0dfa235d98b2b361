import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { TaskQueue } from '@app/pg-queue';
import { drainQueue, tickSchedules, wakeWorkflows } from '@app/pg-queue/testing';
import { AppModule } from '../../src/app.module';
import { PaymentGateway } from '../../src/payments/payment-gateway';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

describe('example app: orders → payment → email; delivery orders as a workflow', () => {
  let db: TestDatabase;
  let app: INestApplication;
  let base: string;
  let gateway: PaymentGateway;

  beforeAll(async () => {
    db = await createTestDatabase();
    process.env.DATABASE_URL = db.url;
    process.env.PGQUEUE_AUTOSTART = 'false'; // the test drives the queue with drainQueue
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    app = moduleRef.createNestApplication({ logger: ['error'] });
    await app.listen(0, '127.0.0.1');
    base = await app.getUrl();
    gateway = app.get(PaymentGateway);
    gateway.latencyMs = [0, 1];
  });
  afterAll(async () => {
    await app.close();
    delete process.env.PGQUEUE_AUTOSTART;
    await db.drop();
  });

  const post = (body: unknown) =>
    fetch(`${base}/orders`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  it('POST /orders writes the order and its confirmation task in one transaction; the chain completes', async () => {
    gateway.failureRate = 0;
    const res = await post({ customer: 'ada', amountCents: 4200 });
    expect(res.status).toBe(201);
    const order = (await res.json()) as { id: number };
    const [task] = await db.sql("SELECT queue, payload FROM pgqueue.task WHERE queue = 'order.confirm'");
    expect(task).toEqual({ queue: 'order.confirm', payload: { orderId: order.id } });

    expect(await drainQueue(app)).toBe(3);
    const done = (await (await fetch(`${base}/orders/${order.id}`)).json()) as { emails: unknown[] };
    expect(done).toMatchObject({ status: 'completed', payment: { externalRef: `order-${order.id}`, amountCents: 4200 } });
    expect(done.emails).toHaveLength(1);
    const chain = await db.sql('SELECT queue, parent_id::text FROM pgqueue.task_archive ORDER BY id');
    expect(chain.map((c) => c.queue)).toEqual(['order.confirm', 'payment.capture', 'email.send']);
  });

  it('rejects a bad order without writing anything', async () => {
    const before = await db.sql('SELECT count(*)::int AS n FROM pgqueue.task');
    expect((await post({ customer: '', amountCents: 1 })).status).toBe(400);
    expect(await db.sql('SELECT count(*)::int AS n FROM pgqueue.task')).toEqual(before);
  });

  it('a gateway outage retries the capture with backoff; the customer is charged once', async () => {
    const order = (await (await post({ customer: 'bob', amountCents: 999 })).json()) as { id: number };
    gateway.failureRate = 1;
    await drainQueue(app);
    // Failed and waiting for its retry. The drain's later rounds may already have run a retry whose
    // backoff (50-100 ms) passed meanwhile: the attempt number is not pinned.
    const [pending] = await db.sql("SELECT state, attempt, last_error FROM pgqueue.task WHERE queue = 'payment.capture'");
    expect(pending).toMatchObject({ state: 'pending', attempt: expect.any(Number) });
    expect(pending.last_error).toMatch(/gateway timeout/);
    expect(await db.sql('SELECT count(*)::int AS n FROM payments WHERE order_id = $1', [order.id])).toEqual([{ n: 0 }]);

    gateway.failureRate = 0;
    // the retry is due after its backoff (50-100 ms); drain until the order completes
    const until = Date.now() + 10_000;
    while ((await db.sql('SELECT status FROM orders WHERE id = $1', [order.id]))[0].status !== 'completed') {
      if (Date.now() > until) throw new Error('order did not complete');
      await drainQueue(app);
      await new Promise((r) => setTimeout(r, 25));
    }
    expect(await db.sql('SELECT count(*)::int AS n FROM payments WHERE order_id = $1', [order.id])).toEqual([{ n: 1 }]);
    // The capture that succeeded was a retry.
    const [captured] = await db.sql("SELECT attempt FROM pgqueue.task_archive WHERE queue = 'payment.capture' AND payload->>'orderId' = $1", [String(order.id)]);
    expect(captured.attempt).toBeGreaterThanOrEqual(2);
  });

  it('PATCH before confirmation replaces the pending confirmation (one task per order, by key)', async () => {
    gateway.failureRate = 0;
    const order = (await (await post({ customer: 'cy', amountCents: 100 })).json()) as { id: number };
    const patch = (amountCents: number) =>
      fetch(`${base}/orders/${order.id}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ amountCents }) });
    expect((await patch(150)).status).toBe(200);
    expect((await patch(175)).status).toBe(200);
    const confirms = await db.sql("SELECT count(*)::int AS n FROM pgqueue.task WHERE queue = 'order.confirm' AND dedup_key = $1", [`order-${order.id}`]);
    expect(confirms).toEqual([{ n: 1 }]);
    await drainQueue(app);
    const [row] = await db.sql('SELECT status, amount_cents, revision, confirmed_revision FROM orders WHERE id = $1', [order.id]);
    expect(row).toEqual({ status: 'completed', amount_cents: 175, revision: 3, confirmed_revision: 3 });
    expect(await db.sql('SELECT amount_cents FROM payments WHERE order_id = $1', [order.id])).toEqual([{ amount_cents: 175 }]);
    expect((await patch(200)).status).toBe(409); // paid: no more edits
  });

  it('GET /health reports the queue through terminus (autoStart off here: no worker loop)', async () => {
    const res = await fetch(`${base}/health`);
    expect(res.status).toBe(200);
    // The drains of the tests above started the LISTEN connection (drains hear cancel requests).
    expect(await res.json()).toMatchObject({ status: 'ok', info: { queue: { status: 'up', database: 'up', listen: 'connected', workers: [] } } });
  });

  it('the hourly report runs from its schedule', async () => {
    // the app stopped just after 10:00 yesterday and restarts now: one catch-up run (missed: 'once')
    await tickSchedules(app);
    const [{ missedTick }] = await db.sql(
      "UPDATE pgqueue.schedule SET next_run_at = date_trunc('hour', now()) - interval '1 day' WHERE name = 'reports.hourly' RETURNING next_run_at AS \"missedTick\"",
    );
    const enqueued = await tickSchedules(app);
    // One catch-up task for the missed tick. Within a minute of the hour, this hour's tick is
    // still on time and fires as well; nothing else may.
    const ticks = await db.sql(
      `SELECT run_at = $1 AS "catchUp", run_at = date_trunc('hour', run_at) AND run_at > now() - interval '2 minutes' AS "thisHour"
       FROM pgqueue.task WHERE queue = 'reports.hourly' ORDER BY run_at`,
      [missedTick],
    );
    expect(ticks).toHaveLength(enqueued);
    expect(ticks[0]).toEqual({ catchUp: true, thisHour: false });
    expect(ticks.slice(1)).toEqual(enqueued === 2 ? [{ catchUp: false, thisHour: true }] : []);
    await drainQueue(app);
    const reports = await db.sql('SELECT orders FROM reports');
    expect(reports).toHaveLength(enqueued);
    const [{ next }] = await db.sql("SELECT next_run_at > now() AS next FROM pgqueue.schedule WHERE name = 'reports.hourly'");
    expect(next).toBe(true);
  });

  describe('a delivery order: the order.fulfil workflow (charge → reserve → delivered, or refund on timeout)', () => {
    const deliveryOrder = async (customer: string, amountCents: number) => {
      const res = await post({ customer, amountCents, delivery: true });
      expect(res.status).toBe(201);
      const order = (await res.json()) as { id: number; fulfilmentTaskId: string };
      expect(order.fulfilmentTaskId).toMatch(/^\d+$/);
      return order;
    };
    const delivered = (id: number, at?: string) =>
      fetch(`${base}/orders/${id}/delivered`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(at ? { at } : {}) });
    /** The order's business rows: each must exist once, whatever the replays. */
    const rows = async (orderId: number) => {
      const [row] = await db.sql(
        `SELECT o.status,
                (SELECT count(*)::int FROM payments p WHERE p.order_id = o.id) AS payments,
                (SELECT count(*)::int FROM reservations r WHERE r.order_id = o.id) AS reservations,
                (SELECT count(*)::int FROM reservations r WHERE r.order_id = o.id AND r.released_at IS NOT NULL) AS released,
                (SELECT count(*)::int FROM emails e WHERE e.order_id = o.id) AS emails
         FROM orders o WHERE o.id = $1`,
        [orderId],
      );
      return row;
    };

    it('charges with its step key, reserves once, parks until the delivered signal, then sends the e-mail', async () => {
      gateway.failureRate = 0;
      const queue = app.get(TaskQueue);
      const order = await deliveryOrder('dee', 2500);
      const id = order.fulfilmentTaskId;
      await drainQueue(app);
      const parked = await queue.get(id);
      expect(parked).toMatchObject({ queue: 'order.fulfil', state: 'waiting', workflow: { waitingFor: { kind: 'signal', name: 'delivered', until: expect.any(Date) } } });
      expect(parked!.workflow!.steps.map((s) => [s.kind, s.name, s.outcome])).toEqual([
        ['step', 'charge', 'ok'],
        ['transaction', 'reserve', 'ok'],
        ['signal', 'delivered', 'waiting'],
      ]);
      expect(await rows(order.id)).toEqual({ status: 'reserved', payments: 1, reservations: 1, released: 0, emails: 0 });

      const at = '2026-11-25T12:00:00.000Z';
      expect((await delivered(order.id, at)).status).toBe(201);
      await drainQueue(app); // the workflow runs again from the top: charge and reserve replay, the signal is taken
      const done = await queue.get(id);
      expect(done).toMatchObject({ state: 'done', result: { deliveredAt: at, chargeId: expect.stringMatching(/^ch_/) } });
      expect(await rows(order.id)).toEqual({ status: 'completed', payments: 1, reservations: 1, released: 0, emails: 1 });
      // One gateway call for two runs of the method, with the step's key.
      expect(gateway.chargeKeys.filter((k) => k.startsWith(`${id}:`))).toEqual([`${id}:charge`]);
      const [payment] = await db.sql('SELECT external_ref FROM payments WHERE order_id = $1', [order.id]);
      expect(payment.external_ref).toBe((done!.result as { chargeId: string }).chargeId);
      // The follow-up ran once, as a child of the workflow's task.
      const emails = await db.sql("SELECT parent_id::text AS parent FROM pgqueue.task_archive WHERE queue = 'email.send' AND payload->>'orderId' = $1", [String(order.id)]);
      expect(emails).toEqual([{ parent: id }]);
      // Delivered twice: the workflow has ended.
      expect((await delivered(order.id)).status).toBe(409);
    });

    it('a signal sent before the workflow waits is kept for it', async () => {
      gateway.failureRate = 0;
      const order = await deliveryOrder('eve', 700);
      expect((await delivered(order.id)).status).toBe(201); // the workflow has not run yet
      await drainQueue(app);
      expect(await app.get(TaskQueue).get(order.fulfilmentTaskId)).toMatchObject({ state: 'done' });
      expect(await rows(order.id)).toEqual({ status: 'completed', payments: 1, reservations: 1, released: 0, emails: 1 });
    });

    it('with no delivery before the timeout, refunds once and releases the reservation', async () => {
      gateway.failureRate = 0;
      const queue = app.get(TaskQueue);
      const refundsBefore = gateway.distinctRefunds;
      const order = await deliveryOrder('fay', 1300);
      const id = order.fulfilmentTaskId;
      await drainQueue(app);
      expect(await queue.get(id)).toMatchObject({ state: 'waiting', workflow: { waitingFor: { kind: 'signal', name: 'delivered' } } });
      await drainQueue(app); // the timeout (3 days) has not come: nothing runs
      expect(await queue.get(id)).toMatchObject({ state: 'waiting' });

      expect(await wakeWorkflows(app)).toBeGreaterThanOrEqual(1); // the three days are over
      await drainQueue(app);
      const done = await queue.get(id);
      expect(done).toMatchObject({ state: 'done', result: { refunded: true, refundId: `re_${id}:refund` } });
      expect(done!.workflow!.steps.map((s) => [s.kind, s.name, s.outcome])).toEqual([
        ['step', 'charge', 'ok'],
        ['transaction', 'reserve', 'ok'],
        ['signal', 'delivered', 'ok'],
        ['step', 'refund', 'ok'],
        ['transaction', 'release', 'ok'],
      ]);
      expect(await rows(order.id)).toEqual({ status: 'refunded', payments: 1, reservations: 1, released: 1, emails: 0 });
      expect(gateway.distinctRefunds).toBe(refundsBefore + 1);
      expect(gateway.chargeKeys.filter((k) => k.startsWith(`${id}:`))).toEqual([`${id}:charge`]);
      // Too late: the courier's report finds the order refunded.
      expect((await delivered(order.id)).status).toBe(409);
    });

    it('refuses the delivered signal for an order without a workflow, and edits of delivery orders', async () => {
      const plain = (await (await post({ customer: 'gus', amountCents: 100 })).json()) as { id: number };
      expect((await delivered(plain.id)).status).toBe(409);
      expect((await delivered(999_999)).status).toBe(404);
      const order = await deliveryOrder('hal', 100);
      const patch = await fetch(`${base}/orders/${order.id}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ amountCents: 5 }) });
      expect(patch.status).toBe(409);
      expect((await post({ customer: 'ivy', amountCents: 100, delivery: 'yes' })).status).toBe(400);
      await drainQueue(app);
    });
  });
});
