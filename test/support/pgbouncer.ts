import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Client } from 'pg';
import { portNobodyListensOn } from './free-port';
import { waitFor } from './wait-for';

/** Where Debian's `pgbouncer` package puts it; PATH otherwise. `.ci/run` installs it when missing. */
function pgbouncerBinary(): string {
  for (const candidate of ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer']) if (fs.existsSync(candidate)) return candidate;
  const found = spawnSync('sh', ['-c', 'command -v pgbouncer'], { encoding: 'utf8' }).stdout.trim();
  if (found) return found;
  throw new Error('pgbouncer is not installed: `apt-get install pgbouncer` (.ci/run does it), or run this spec on a machine that has it');
}

export interface PgBouncer {
  /** A copy of `url` that goes through PgBouncer (same user and database). */
  url(url: string): string;
  stop(): Promise<void>;
}

/**
 * A PgBouncer on 127.0.0.1 in front of the PostgreSQL at `serverUrl`, in transaction pooling (the
 * mode most production PostgreSQL sits behind): a server connection is lent for one transaction
 * only, so nothing of a session (SET, advisory locks, LISTEN, named prepared statements) survives
 * between transactions. `poolSize` server connections per database and user.
 */
export async function startPgBouncer(serverUrl: string, { poolSize = 20 } = {}): Promise<PgBouncer> {
  const server = new URL(serverUrl);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgqueue-pgbouncer-'));
  const port = await portNobodyListensOn();
  const asRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  fs.writeFileSync(path.join(dir, 'userlist.txt'), `"${decodeURIComponent(server.username || 'postgres')}" ""\n`);
  fs.writeFileSync(
    path.join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      `* = host=${server.hostname} port=${server.port || 5432}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      `unix_socket_dir = ${dir}`,
      'auth_type = trust',
      `auth_file = ${path.join(dir, 'userlist.txt')}`,
      'pool_mode = transaction',
      `default_pool_size = ${poolSize}`,
      'max_client_conn = 1000',
      // node-postgres and Prisma send these at startup; transaction pooling cannot keep them per client.
      'ignore_startup_parameters = extra_float_digits,options,application_name',
      `logfile = ${path.join(dir, 'pgbouncer.log')}`,
      `pidfile = ${path.join(dir, 'pgbouncer.pid')}`,
      '',
    ].join('\n'),
  );
  if (asRoot) spawnSync('chown', ['-R', 'postgres:postgres', dir]);
  // PgBouncer refuses to run as root: -u switches to the postgres user.
  const child: ChildProcess = spawn(pgbouncerBinary(), [...(asRoot ? ['-u', 'postgres'] : []), path.join(dir, 'pgbouncer.ini')], { stdio: 'ignore' });
  let exited = false;
  child.on('exit', () => (exited = true));
  const viaBouncer = (url: string) => {
    const u = new URL(url);
    u.hostname = '127.0.0.1';
    u.port = String(port);
    return u.toString();
  };
  await waitFor('PgBouncer to accept connections', async () => {
    if (exited) throw new Error(`pgbouncer exited at startup:\n${fs.existsSync(path.join(dir, 'pgbouncer.log')) ? fs.readFileSync(path.join(dir, 'pgbouncer.log'), 'utf8') : ''}`);
    const c = new Client({ connectionString: viaBouncer(serverUrl) });
    try {
      await c.connect();
      await c.query('SELECT 1');
      return true;
    } catch {
      return false;
    } finally {
      await c.end().catch(() => undefined);
    }
  }, { timeoutMs: 15_000 });
  return {
    url: viaBouncer,
    async stop() {
      if (!exited) {
        child.kill('SIGINT');
        await waitFor('PgBouncer to exit', () => exited, { timeoutMs: 10_000 }).catch(() => child.kill('SIGKILL'));
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
