import type * as OtelApi from '@opentelemetry/api';
import type { HandlerMode, Task } from '../types';

/**
 * OpenTelemetry through `@opentelemetry/api` only, an optional peer: loaded on first use, and
 * without it tasks carry no trace context and handlers run without spans. With it, an enqueue
 * stores the active trace context with the task (its propagation carrier, with a W3C
 * `traceparent` always in it), and the handler runs in a CONSUMER span that continues it, named
 * and attributed by the messaging semantic conventions. Whether spans are recorded is up to the
 * app's SDK: with none registered, the API's no-op tracer costs next to nothing.
 */
let loaded: typeof OtelApi | null | undefined;
/** One tracer for the process (the API's proxy: it follows the provider registered at any time). */
let tracer: OtelApi.Tracer | null = null;

function otel(): typeof OtelApi | null {
  if (loaded === undefined) {
    try {
      loaded = require('@opentelemetry/api') as typeof OtelApi;
    } catch {
      loaded = null;
    }
  }
  return loaded;
}

/** The messaging system name in span attributes. */
const SYSTEM = 'pg-queue';
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/**
 * The active trace context as JSON text for the task row, or null when no span is active. The
 * app's propagator (W3C by default in the SDK) adds what it carries (tracestate, baggage); the
 * `traceparent` is written here too, so the trace continues even when no propagator is registered.
 */
export function currentTraceContext(): string | null {
  const api = otel();
  if (!api) return null;
  const active = api.context.active();
  const span = api.trace.getSpanContext(active);
  if (!span || !api.isSpanContextValid(span)) return null;
  const carrier: Record<string, string> = {};
  api.propagation.inject(active, carrier);
  carrier.traceparent ??= `00-${span.traceId}-${span.spanId}-${(span.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
  return JSON.stringify(carrier);
}

/** The context a task's handler span continues: the one stored at enqueue, or none. */
function parentContext(api: typeof OtelApi, carrier: Record<string, string> | null): OtelApi.Context {
  if (!carrier) return api.ROOT_CONTEXT;
  const extracted = api.propagation.extract(api.ROOT_CONTEXT, carrier);
  if (api.trace.getSpanContext(extracted)) return extracted;
  const m = typeof carrier.traceparent === 'string' ? TRACEPARENT.exec(carrier.traceparent) : null;
  if (!m) return api.ROOT_CONTEXT;
  return api.trace.setSpanContext(extracted, { traceId: m[1], spanId: m[2], traceFlags: parseInt(m[3], 16), isRemote: true });
}

/** A handler's span: `run` executes the handler inside it, `end` records how the attempt ended. */
export interface HandlerSpan {
  run<T>(fn: () => T): T;
  end(outcome: { kind: 'ok' } | { kind: 'error'; error: unknown } | { kind: 'aborted'; reason: unknown }): void;
}

/** The API's no-op provider, which its global proxy delegates to until an SDK registers one. */
let noopProvider: OtelApi.TracerProvider | null = null;

/**
 * Whether an SDK registered a tracer provider. Without one, spans would record nothing: a handler
 * then runs without a span (a no-op span per task slows a lease-mode drain noticeably, its
 * allocations mostly), inside its enqueuer's context only when it has one.
 */
function sdkRegistered(api: typeof OtelApi): boolean {
  noopProvider ??= new api.ProxyTracerProvider().getDelegate();
  const provider = api.trace.getTracerProvider();
  return !(provider instanceof api.ProxyTracerProvider && provider.getDelegate() === noopProvider);
}

/** Starts the CONSUMER span of one attempt; null when there is nothing to record or carry on. */
export function startHandlerSpan(task: Task, mode: HandlerMode, carrier: Record<string, string> | null): HandlerSpan | null {
  const api = otel();
  if (!api) return null;
  if (!sdkRegistered(api)) {
    if (!carrier) return null;
    const enqueuer = parentContext(api, carrier);
    return { run: (fn) => api.context.with(enqueuer, fn), end: () => undefined };
  }
  const parent = parentContext(api, carrier);
  tracer ??= api.trace.getTracer(SYSTEM);
  const span = tracer.startSpan(
    `process ${task.queue}`,
    {
      kind: api.SpanKind.CONSUMER,
      attributes: {
        'messaging.system': SYSTEM,
        'messaging.operation.type': 'process',
        'messaging.operation.name': 'process',
        'messaging.destination.name': task.queue,
        'messaging.message.id': task.id,
        'messaging.pg_queue.attempt': task.attempt,
        'messaging.pg_queue.mode': mode,
      },
    },
    parent,
  );
  const active = api.trace.setSpan(parent, span);
  return {
    run: (fn) => api.context.with(active, fn),
    end: (outcome) => {
      if (outcome.kind !== 'ok') {
        const error = outcome.kind === 'error' ? outcome.error : outcome.reason;
        if (error instanceof Error) span.recordException(error);
        span.setStatus({ code: api.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
      }
      span.end();
    },
  };
}

/**
 * Runs one call of a workflow (workflow.context.ts) in a span of its own, `workflow <kind> <name>`,
 * a child of the active span (the workflow's `process` span). Without a registered SDK it just runs.
 */
export async function inStepSpan<T>(kind: string, name: string, workflowId: string, fn: () => Promise<T>): Promise<T> {
  const api = otel();
  if (!api || !sdkRegistered(api)) return fn();
  tracer ??= api.trace.getTracer(SYSTEM);
  const span = tracer.startSpan(`workflow ${kind} ${name}`, {
    kind: api.SpanKind.INTERNAL,
    attributes: { 'messaging.system': SYSTEM, 'messaging.message.id': workflowId, 'pg_queue.workflow.call': kind, 'pg_queue.workflow.step': name },
  });
  try {
    return await api.context.with(api.trace.setSpan(api.context.active(), span), fn);
  } catch (error) {
    if (error instanceof Error) span.recordException(error);
    span.setStatus({ code: api.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
    throw error;
  } finally {
    span.end();
  }
}
