/**
 * OpenTelemetry across the queue, recorded by the SDK's in-memory exporter: a real HTTP request
 * (carrying a W3C traceparent) enqueues a task in its transaction; the transactional handler
 * enqueues a follow-up; a lease handler runs it. All of it is one trace, each handler a CONSUMER
 * span under the span that enqueued it, attributed by the messaging semantic conventions.
 */
import { Body, Controller, Headers, Injectable, Post, type INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { PgQueueModule, TaskHandler, TaskQueue, Workflow, WorkerOrchestrator, type LeaseTaskContext, type Task, type TaskContext, type WorkflowContext } from '@app/pg-queue';
import type { Prisma, PrismaClient } from '../../src/generated/prisma/client';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { waitFor } from '../support/wait-for';

const exporter = new InMemorySpanExporter();
const tracer = () => trace.getTracer('tracing.spec');

@Injectable()
class TracedHandlers {
  @TaskHandler('trace.confirm', { mode: 'transactional' })
  async confirm(task: Task<{ orderId: number }>, ctx: TaskContext<Prisma.TransactionClient>) {
    await ctx.tx.order.update({ where: { id: task.payload.orderId }, data: { status: 'confirmed' } });
    await ctx.enqueue('trace.notify', { orderId: task.payload.orderId });
  }

  @TaskHandler('trace.notify', { mode: 'lease' })
  async notify(task: Task<{ orderId: number }>, _ctx: LeaseTaskContext) {
    tracer().startSpan('send email').end(); // the handler's own work: a child of its span
    void task;
  }

  @Workflow('trace.workflow')
  async workflow(_input: unknown, wf: WorkflowContext) {
    await wf.step('charge', async () => tracer().startSpan('gateway call').end());
    await wf.transaction('reserve', async (tx) => tx.$queryRawUnsafe('SELECT 1'));
    return 'ok';
  }

  @TaskHandler('trace.fail', { mode: 'lease', maxAttempts: 1 })
  async fail() {
    throw new Error('card declined');
  }
}

class PrismaClientHolder {
  constructor(readonly client: PrismaClient) {}
}

@Controller('orders')
class OrdersController {
  constructor(
    private readonly prisma: PrismaClientHolder,
    private readonly queue: TaskQueue,
  ) {}

  // What HTTP instrumentation does for a real app: continue the caller's trace in a SERVER span.
  @Post()
  place(@Headers() headers: Record<string, string>, @Body() body: { customer: string }) {
    const parent = propagation.extract(ROOT_CONTEXT, headers);
    return tracer().startActiveSpan('POST /orders', { kind: SpanKind.SERVER }, parent, async (span) => {
      try {
        return await this.prisma.client.$transaction(async (tx) => {
          const order = await tx.order.create({ data: { customer: body.customer, amountCents: 100, updatedAt: new Date() } });
          const taskId = await this.queue.enqueue('trace.confirm', { orderId: order.id }, { tx });
          return { orderId: order.id, taskId };
        });
      } finally {
        span.end();
      }
    });
  }
}

describe('OpenTelemetry: enqueue → handler spans continue the enqueuer\'s trace', () => {
  let db: TestDatabase;
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    trace.setGlobalTracerProvider(new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] }));
    db = await createTestDatabase();
    const prisma = db.prisma(4);
    const moduleRef = await Test.createTestingModule({
      imports: [PgQueueModule.forRoot({ prisma, databaseUrl: db.url, pollIntervalMs: 200 })],
      controllers: [OrdersController],
      providers: [TracedHandlers, { provide: PrismaClientHolder, useValue: new PrismaClientHolder(prisma) }],
    }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.listen(0, '127.0.0.1');
    url = await app.getUrl();
  });

  afterAll(async () => {
    await app?.close();
    await db?.drop();
    trace.disable();
    propagation.disable();
    context.disable();
  });

  beforeEach(() => exporter.reset());

  const spans = () => exporter.getFinishedSpans();
  const named = (name: string) => spans().find((s) => s.name === name);
  const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;

  it('an HTTP request → enqueue → transactional handler → follow-up → lease handler is one trace', async () => {
    // The caller's own span, propagated over HTTP like any instrumented client would.
    const client = tracer().startSpan('client: place order', { kind: SpanKind.CLIENT });
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    propagation.inject(trace.setSpan(ROOT_CONTEXT, client), headers);
    const res = await fetch(`${url}/orders`, { method: 'POST', headers, body: JSON.stringify({ customer: 'ada' }) });
    client.end();
    expect(res.status).toBe(201);
    const { taskId } = (await res.json()) as { taskId: string };

    await waitFor('the follow-up handler span', () => named('send email'));
    const server = named('POST /orders')!;
    const confirm = named('process trace.confirm')!;
    const notify = named('process trace.notify')!;
    const email = named('send email')!;
    const traceId = client.spanContext().traceId;

    expect({
      traceIds: [...new Set([server, confirm, notify, email].map((s) => s.spanContext().traceId))],
      serverParent: parentOf(server),
      confirmParent: parentOf(confirm),
      notifyParent: parentOf(notify),
      emailParent: parentOf(email),
      kinds: [confirm.kind, notify.kind],
      statuses: [confirm.status.code, notify.status.code],
    }).toEqual({
      traceIds: [traceId],
      serverParent: client.spanContext().spanId,
      confirmParent: server.spanContext().spanId,
      notifyParent: confirm.spanContext().spanId,
      emailParent: notify.spanContext().spanId,
      kinds: [SpanKind.CONSUMER, SpanKind.CONSUMER],
      statuses: [SpanStatusCode.UNSET, SpanStatusCode.UNSET],
    });
    expect(confirm.attributes).toEqual({
      'messaging.system': 'pg-queue',
      'messaging.operation.type': 'process',
      'messaging.operation.name': 'process',
      'messaging.destination.name': 'trace.confirm',
      'messaging.message.id': taskId,
      'messaging.pg_queue.attempt': 1,
      'messaging.pg_queue.mode': 'transactional',
    });
    expect(notify.attributes).toMatchObject({ 'messaging.destination.name': 'trace.notify', 'messaging.pg_queue.mode': 'lease' });
    // The task carried the context in its row (the archive keeps it).
    const [row] = await db.sql("SELECT trace_context->>'traceparent' AS tp FROM pgqueue.task_archive WHERE id = $1", [taskId]);
    expect(row.tp).toBe(`00-${traceId}-${server.spanContext().spanId}-01`);
  });

  it('without an active span nothing is stored and the handler starts a trace of its own', async () => {
    const queue = app.get(TaskQueue);
    const orderId = (await db.sql("INSERT INTO orders (customer, amount_cents, updated_at) VALUES ('grace', 1, now()) RETURNING id"))[0].id;
    const taskId = await queue.enqueue('trace.confirm', { orderId });
    await waitFor('both handler spans', () => named('process trace.confirm') && named('process trace.notify'));
    const confirm = named('process trace.confirm')!;
    expect(parentOf(confirm)).toBeUndefined();
    expect(named('process trace.notify')!.spanContext().traceId).toBe(confirm.spanContext().traceId);
    const [row] = await db.sql('SELECT trace_context FROM pgqueue.task_archive WHERE id = $1', [taskId]);
    expect(row.trace_context).toBeNull();
  });

  it('a task cancelled before it ran keeps its trace context in the archive', async () => {
    const root = tracer().startSpan('enqueuer');
    const taskId = await context.with(trace.setSpan(ROOT_CONTEXT, root), () => app.get(TaskQueue).enqueue('trace.confirm', { orderId: 0 }, { delayMs: 3_600_000 }));
    root.end();
    expect(await app.get(TaskQueue).cancel(taskId)).toBeTruthy();
    const [row] = await db.sql("SELECT state, trace_context->>'traceparent' AS tp FROM pgqueue.task_archive WHERE id = $1", [taskId]);
    expect(row).toEqual({ state: 'cancelled', tp: `00-${root.spanContext().traceId}-${root.spanContext().spanId}-01` });
  });

  it('a failing handler\'s span has status ERROR and the exception recorded', async () => {
    const root = tracer().startSpan('enqueuer');
    await context.with(trace.setSpan(ROOT_CONTEXT, root), () => app.get(TaskQueue).enqueue('trace.fail', {}));
    root.end();
    await waitFor('the failed handler span', () => named('process trace.fail'));
    const failed = named('process trace.fail')!;
    expect({ parent: parentOf(failed), status: failed.status, exception: failed.events.map((e) => [e.name, e.attributes?.['exception.message']]) }).toEqual({
      parent: root.spanContext().spanId,
      status: { code: SpanStatusCode.ERROR, message: 'card declined' },
      exception: [['exception', 'card declined']],
    });
    await app.get(WorkerOrchestrator).drain('trace.fail'); // nothing left to run: it went dead at once
  });

  it('a workflow has a span per call under its process span, the step\'s own work beneath it', async () => {
    const id = await app.get(TaskQueue).enqueue('trace.workflow', {});
    await waitFor('the workflow done', async () => (await app.get(TaskQueue).get(id))?.state === 'done');
    await waitFor('its spans exported', () => named('process trace.workflow'));
    const process = named('process trace.workflow')!;
    const charge = named('workflow step charge')!;
    const reserve = named('workflow transaction reserve')!;
    expect(parentOf(charge)).toBe(process.spanContext().spanId);
    expect(parentOf(reserve)).toBe(process.spanContext().spanId);
    expect(parentOf(named('gateway call')!)).toBe(charge.spanContext().spanId);
    expect(charge.attributes).toMatchObject({ 'messaging.message.id': id, 'pg_queue.workflow.step': 'charge' });
  });
});
