import type { PrismaClientLike } from './types';

/**
 * What the queue reads of the app's PrismaClient beyond its query API: the @prisma/adapter-pg
 * adapter's config (pool size, server address), from Prisma's internals. Used by the connection
 * budget, the schema installer and startup errors; every reader copes with null (another adapter,
 * a Prisma version that keeps it elsewhere).
 */

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

/**
 * Whether `db` is a root PrismaClient, which can open transactions of its own, rather than the
 * client of an interactive transaction (the caller's, or one of ours). Having `$transaction` is
 * no test: Prisma 7's transaction clients have it (nested transactions, as savepoints), and work
 * "in a transaction of its own" done there would run in the caller's, with its SET LOCAL bounds
 * left set for the rest of it. Transaction clients of Prisma 6 and 7 both lack `$connect`.
 */
export function isRootClient(db: unknown): db is PrismaClientLike {
  const c = db as { $transaction?: unknown; $connect?: unknown } | null;
  return typeof c?.$transaction === 'function' && typeof c.$connect === 'function';
}
