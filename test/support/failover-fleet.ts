import { PrismaPg } from '@prisma/adapter-pg';
import { Pool } from 'pg';
import { PrismaClient } from '../../src/generated/prisma/client';
import { LEDGER_LEASE, LEDGER_TX, startLedgerWorker, type LedgerWorker } from './ledger-handlers';
import { startReplicatedPair, type ReplicatedPair, type Server } from './replicated-pair';
import { StallProxy } from './stall-proxy';
import { createLedgerTables } from './task-ledger';

/**
 * Pools and Prisma clients on one address (the failover specs' proxy), made to survive cut
 * connections as the README's Deployment section says: an 'error' listener on every connection
 * and on the pool. Closed together.
 */
export class ProxiedClients {
  private readonly pools: Pool[] = [];
  private readonly prismas: PrismaClient[] = [];

  constructor(private readonly url: string) {}

  pool(max: number, name: string): Pool {
    const pool = new Pool({ connectionString: this.url, max, application_name: name, connectionTimeoutMillis: 5000 });
    pool.on('connect', (c) => c.on('error', () => undefined));
    pool.on('error', () => undefined);
    this.pools.push(pool);
    return pool;
  }

  prisma(max: number, name: string): PrismaClient {
    const prisma = new PrismaClient({ adapter: new PrismaPg(this.pool(max, name)) });
    this.prismas.push(prisma);
    return prisma;
  }

  async close(): Promise<void> {
    await Promise.all(this.prismas.map((p) => p.$disconnect().catch(() => undefined)));
    await Promise.all(this.pools.map((p) => p.end().catch(() => undefined)));
  }
}

/** Who completed which task, and when (epoch ms), from each instance's own events. */
export interface Completion {
  worker: string;
  id: string;
  at: number;
}

/**
 * Ledger workers `names` (see ledger-handlers.ts) through `clients`' address, each draining both
 * ledger queues (4 transactional, 6 lease-mode at once) with leases of `leaseMs`, LISTEN on the same
 * address; and the completions they report.
 */
export async function startFailoverWorkers(
  names: string[],
  clients: ProxiedClients,
  url: string,
  { pollIntervalMs, rescueIntervalMs, leaseMs, poolSize }: { pollIntervalMs: number; rescueIntervalMs: number; leaseMs: number; poolSize: number },
): Promise<{ workers: LedgerWorker[]; completions: Completion[] }> {
  const workers: LedgerWorker[] = [];
  const completions: Completion[] = [];
  for (const name of names) {
    const w = await startLedgerWorker(name, clients.prisma(poolSize, `${name} worker`), url, {
      databaseUrl: url,
      pollIntervalMs,
      rescueIntervalMs,
      queues: { [LEDGER_TX]: { concurrency: 4, leaseMs }, [LEDGER_LEASE]: { concurrency: 6, leaseMs } },
    }, 20);
    w.queue.events$.subscribe((e) => e.type === 'completed' && completions.push({ worker: name, id: e.taskId, at: Date.now() }));
    workers.push(w);
  }
  return { workers, completions };
}

/**
 * The failover specs' stage: a replicated pair (see replicated-pair.ts) behind a proxy that stands
 * for the moving address, the ledger tables on the primary, and the clients and apps a spec opens
 * through it; `close` ends them all, the producer's loop first (`ended`).
 */
export class FailoverStage {
  /** Which server is the primary now: a spec moves it to the standby once promoted. */
  primary: Server;
  readonly apps: { close(): Promise<void> }[] = [];
  /** Set by close: ends the producer's loop (a failed test leaves it running otherwise). */
  ended = false;

  private constructor(
    readonly pair: ReplicatedPair,
    readonly proxy: StallProxy,
    /** The app database through the proxy: where every app and ledger connection goes. */
    readonly url: string,
    readonly clients: ProxiedClients,
  ) {
    this.primary = pair.primary;
  }

  static async start(label: string, options?: { synchronous?: boolean }): Promise<FailoverStage> {
    const pair = await startReplicatedPair(label, options);
    const proxy = new StallProxy(pair.primary.port);
    await proxy.start();
    const url = proxy.url(pair.primary.url);
    const stage = new FailoverStage(pair, proxy, url, new ProxiedClients(url));
    await createLedgerTables(stage.sql);
    return stage;
  }

  /** One statement on whichever server is the primary now. */
  readonly sql = <T = any>(text: string, values?: unknown[]): Promise<T[]> => this.pair.sql<T>(this.primary, text, values);

  async close(): Promise<void> {
    this.ended = true;
    for (const a of this.apps.reverse()) await a.close().catch(() => undefined);
    await this.clients.close();
    await this.proxy.close();
    this.pair.stop();
  }
}
