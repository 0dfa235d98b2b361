import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import { Client } from 'pg';
import { StallProxy } from './stall-proxy';
import { waitFor } from './wait-for';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const local = require('../../scripts/local-postgres.js') as {
  startLocalPostgres: (o: { label?: string; settings?: Record<string, string | number> }) => Promise<{ url: string; port: number; dataDir: string; bin: string; stop: () => void }>;
  run: (bin: string, args: string[]) => string;
  runAsync: (bin: string, args: string[]) => Promise<string>;
  freePort: () => Promise<number>;
};
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { migrate } = require('../../scripts/migrate.js') as { migrate: (url: string) => Promise<string[]> };

export interface Server {
  port: number;
  /** The app database (migrated like the example app's) on this server. */
  url: string;
}

/**
 * Two PostgreSQL clusters from the machine's binaries on 127.0.0.1 (see scripts/local-postgres.js):
 * a primary and a streaming-replication standby made by `pg_basebackup -R`, replication
 * synchronous (`synchronous_standby_names = '*'` on the primary: a commit returns once the standby
 * has it) unless `synchronous: false` (a commit returns once the primary has it; the standby
 * follows). The standby's own configuration has no synchronous standby, so that once promoted it
 * commits alone, as a failover manager arranges.
 */
export interface ReplicatedPair {
  primary: Server;
  standby: Server;
  /**
   * The standby's replication connection goes through this proxy: `stall()` makes it lag (the
   * primary's WAL is held, not delivered), `close()` drops what it held (as a crash would).
   */
  link: StallProxy;
  /** One statement on `server`'s app database, on a connection of its own. */
  sql<T = any>(server: Server, text: string, values?: unknown[]): Promise<T[]>;
  /** `pg_ctl stop -m immediate`: the primary crashes (no checkpoint, sessions cut). */
  crashPrimary(): Promise<void>;
  /** `pg_ctl promote`: resolves once the standby accepts writes. */
  promoteStandby(): Promise<void>;
  /** Stops both clusters and removes their directories. Never throws. */
  stop(): void;
}

const asRoot = typeof process.getuid === 'function' && process.getuid() === 0;

export async function startReplicatedPair(label: string, { synchronous = true }: { synchronous?: boolean } = {}): Promise<ReplicatedPair> {
  const stops: (() => void)[] = [];
  const stop = () => stops.splice(0).reverse().forEach((s) => s());
  try {
    // fsync off: the machine does not crash, only the server process (-m immediate).
    const pg = await local.startLocalPostgres({ label: `${label}-primary`, settings: { wal_level: 'replica', max_wal_senders: 4, fsync: 'off', full_page_writes: 'off' } });
    stops.push(pg.stop);
    const pgCtl = path.join(pg.bin, 'pg_ctl');
    fs.appendFileSync(path.join(pg.dataDir, 'pg_hba.conf'), '\nhost replication all 127.0.0.1/32 trust\n');
    local.run(pgCtl, ['-D', pg.dataDir, 'reload']);
    const admin = new Client({ connectionString: pg.url });
    await admin.connect();
    await admin.query('CREATE DATABASE app').finally(() => admin.end());
    const primary = { port: pg.port, url: appUrl(pg.url, pg.port) };
    await migrate(primary.url);

    const standbyDir = fs.mkdtempSync(path.join(os.tmpdir(), `pgqueue-${label}-standby-`));
    stops.push(() => {
      try {
        local.run(pgCtl, ['-D', standbyDir, '-m', 'immediate', '-w', 'stop']);
      } catch {
        /* not running */
      }
      fs.rmSync(standbyDir, { recursive: true, force: true });
    });
    if (asRoot) execFileSync('chown', ['postgres:postgres', standbyDir]);
    local.run(path.join(pg.bin, 'pg_basebackup'), ['-h', '127.0.0.1', '-p', String(pg.port), '-U', 'postgres', '-D', standbyDir, '-R', '-X', 'stream', '--checkpoint=fast', '--no-sync']);
    const link = new StallProxy(pg.port);
    await link.start();
    stops.push(() => void link.close());
    // pg_basebackup -R wrote primary_conninfo with the primary's port: through the link instead.
    const autoConf = path.join(standbyDir, 'postgresql.auto.conf');
    fs.writeFileSync(autoConf, fs.readFileSync(autoConf, 'utf8').replace(/\bport=\d+/, `port=${link.port}`));
    const standbyPort = await local.freePort();
    fs.appendFileSync(path.join(standbyDir, 'postgresql.conf'), `\nport = '${standbyPort}'\nunix_socket_directories = '${standbyDir}'\n`);
    local.run(pgCtl, ['-D', standbyDir, '-l', path.join(standbyDir, 'server.log'), '-w', '-t', '60', 'start']);
    const standby = { port: standbyPort, url: appUrl(pg.url, standbyPort) };

    const sql = async <T = any>(server: Server, text: string, values?: unknown[]): Promise<T[]> => {
      const c = new Client({ connectionString: server.url });
      await c.connect();
      try {
        return (await c.query(text, values as unknown[])).rows;
      } finally {
        await c.end().catch(() => undefined);
      }
    };
    if (synchronous) {
      // Synchronous from now on (set after the standby is attached: before, every commit would wait for it).
      await sql(primary, "ALTER SYSTEM SET synchronous_standby_names = '*'");
      await sql(primary, 'SELECT pg_reload_conf()');
    }
    const mode = synchronous ? 'sync' : 'async';
    await waitFor(`the standby to replicate (${mode})`, async () => {
      const [r] = await sql(primary, 'SELECT state, sync_state FROM pg_stat_replication');
      return r?.state === 'streaming' && r.sync_state === mode;
    });
    return {
      primary,
      standby,
      link,
      sql,
      crashPrimary: async () => void (await local.runAsync(pgCtl, ['-D', pg.dataDir, '-m', 'immediate', '-w', 'stop'])),
      promoteStandby: async () => void (await local.runAsync(pgCtl, ['-D', standbyDir, '-w', '-t', '60', 'promote'])),
      stop,
    };
  } catch (err) {
    stop();
    throw err;
  }
}

function appUrl(serverUrl: string, port: number): string {
  const u = new URL(serverUrl);
  u.port = String(port);
  u.pathname = '/app';
  return u.toString();
}
