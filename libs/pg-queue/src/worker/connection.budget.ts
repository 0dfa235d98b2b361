import type { RegisteredHandler } from '../discovery/task-handler.registry';

/** What the server allows, and what this process's Prisma pool may open. */
export interface ConnectionLimits {
  /** The Prisma pool's `max` (null: it could not be read; the pool is then not checked). */
  poolMax: number | null;
  /** max_connections minus superuser_reserved_connections. */
  serverMax: number;
  /** Connections open on the server right now, this process's included. */
  serverInUse: number;
}

export interface ConnectionBudget {
  /** Connections this process's queue work can use at once from the pool. */
  poolNeeds: number;
  /** What the server must accept for this process: its pool when full, and LISTEN. */
  serverNeeds: number;
  /** A configuration that cannot run: refuse it, saying which numbers to change. */
  refusal: string | null;
  /** One that will run but queue on the pool. */
  warning: string | null;
}

/**
 * What the started workers need at once: every transactional slot holds a pool connection for its
 * whole transaction, each queue has one claim in flight, lease-mode completions and heartbeats
 * take one more per lease queue, and the rescuer, pruner and schedule ticker share one; LISTEN is
 * a connection of its own, outside the pool.
 */
export function connectionBudget(handlers: RegisteredHandler[], listens: boolean, limits: ConnectionLimits): ConnectionBudget {
  const transactional = handlers.filter((h) => h.options.mode === 'transactional');
  const lease = handlers.filter((h) => h.options.mode === 'lease');
  const slots = transactional.reduce((n, h) => n + h.options.concurrency, 0);
  const poolNeeds = slots + handlers.length + lease.length + 1;
  const pool = limits.poolMax ?? poolNeeds;
  const serverNeeds = pool + (listens ? 1 : 0);
  const serverFree = limits.serverMax - limits.serverInUse;
  let refusal: string | null = null;
  if (serverNeeds > limits.serverMax) {
    refusal =
      `this process alone needs ${serverNeeds} connections (a Prisma pool of ${pool}${listens ? ' and LISTEN' : ''}) but the server accepts ` +
      `${limits.serverMax} (max_connections minus superuser_reserved_connections): lower the pool's max or raise max_connections`;
  }
  let warning: string | null = null;
  if (limits.poolMax !== null && poolNeeds > limits.poolMax) {
    warning =
      `the queue's work can use ${poolNeeds} pool connections at once (${slots} transactional slots, ${handlers.length} claims, ` +
      `${lease.length} lease-mode completions, 1 for maintenance) but the Prisma pool's max is ${limits.poolMax}: tasks will wait for connections. ` +
      `Raise the pool's max to ${poolNeeds} or lower the transactional queues' concurrency`;
  } else if (refusal === null && serverNeeds > serverFree) {
    warning = `this process may open ${serverNeeds} connections, and the server has ${Math.max(0, serverFree)} free now: other clients hold the rest`;
  }
  return { poolNeeds, serverNeeds, refusal, warning };
}

/**
 * The `max` of a PrismaClient's @prisma/adapter-pg pool, read from Prisma's internals (the adapter
 * factory keeps its pg Pool config); pg's default 10 when none was set; null when the client is
 * not built that way (another adapter, a Prisma version that keeps it elsewhere): then unchecked.
 */
export function prismaPoolMax(prisma: unknown): number | null {
  const adapter = adapterOf(prisma);
  if (!adapter) return null;
  const max = adapter.externalPool?.options?.max ?? adapter.config?.max;
  if (max === undefined && (adapter.config || adapter.externalPool)) return 10;
  return typeof max === 'number' && Number.isInteger(max) && max > 0 ? max : null;
}

interface AdapterConfig {
  config?: { max?: unknown; connectionString?: unknown; host?: unknown; port?: unknown; user?: unknown; database?: unknown };
  externalPool?: { options?: { max?: unknown; connectionString?: unknown; host?: unknown; port?: unknown; user?: unknown; database?: unknown } };
}

/** The config of the client's `@prisma/adapter-pg` adapter (its pool settings, or the pg Pool it was given). */
function adapterOf(prisma: unknown): AdapterConfig | null {
  const config = (prisma as { _originalClient?: { _engineConfig?: { adapter?: unknown } }; _engineConfig?: { adapter?: unknown } })
    ?._originalClient?._engineConfig?.adapter ?? (prisma as { _engineConfig?: { adapter?: unknown } })?._engineConfig?.adapter;
  return config && typeof config === 'object' ? (config as AdapterConfig) : null;
}

/** Where the client's adapter connects (host, port, user, database), for messages; null when unknown. Never the password. */
export function prismaServer(prisma: unknown): { host?: string; port?: number; user?: string; database?: string } | null {
  const adapter = adapterOf(prisma);
  const o = adapter?.externalPool?.options ?? adapter?.config;
  if (!o) return null;
  const text = (v: unknown) => (typeof v === 'string' && v !== '' ? v : undefined);
  if (typeof o.connectionString === 'string') {
    try {
      const u = new URL(o.connectionString);
      return { host: text(u.hostname), port: Number(u.port || 5432), user: text(decodeURIComponent(u.username)), database: text(decodeURIComponent(u.pathname.slice(1))) };
    } catch {
      return null;
    }
  }
  return { host: text(o.host), port: typeof o.port === 'number' ? o.port : undefined, user: text(o.user), database: text(o.database) };
}
