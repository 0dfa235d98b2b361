import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { drainQueue } from '@app/pg-queue/testing';
import { AppModule } from '../../src/app.module';
import { PaymentGateway } from '../../src/payments/payment-gateway';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

describe('example app: orders → payment → email', () => {
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
    const [pending] = await db.sql("SELECT state, attempt, last_error FROM pgqueue.task WHERE queue = 'payment.capture'");
    expect(pending).toMatchObject({ state: 'pending', attempt: 1 });
    expect(pending.last_error).toMatch(/gateway timeout/);

    gateway.failureRate = 0;
    // the retry is due after its backoff (50-100 ms); drain until the order completes
    const until = Date.now() + 10_000;
    while ((await db.sql('SELECT status FROM orders WHERE id = $1', [order.id]))[0].status !== 'completed') {
      if (Date.now() > until) throw new Error('order did not complete');
      await drainQueue(app);
      await new Promise((r) => setTimeout(r, 25));
    }
    expect(await db.sql('SELECT count(*)::int AS n FROM payments WHERE order_id = $1', [order.id])).toEqual([{ n: 1 }]);
  });
});
