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
