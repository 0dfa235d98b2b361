// Starts a throwaway PostgreSQL from the machine's installed binaries, for the demo, the tests and
// the benchmark when DATABASE_URL is unset. Postgres refuses to run as root, so as root the cluster
// is created and run as the `postgres` user. It listens on 127.0.0.1 only, on a free port.
const { execFile, execFileSync, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const BIN_CANDIDATES = [process.env.PG_BIN, '/usr/lib/postgresql/15/bin', '/usr/lib/postgresql/16/bin', '/usr/lib/postgresql/17/bin'];

function findBinDir() {
  for (const dir of BIN_CANDIDATES) {
    if (dir && fs.existsSync(path.join(dir, 'pg_ctl'))) return dir;
  }
  throw new Error('PostgreSQL binaries not found (set PG_BIN or DATABASE_URL)');
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function asPostgresUser() {
  return typeof process.getuid === 'function' && process.getuid() === 0;
}

function run(bin, args, opts = {}) {
  const cmd = asPostgresUser() ? 'runuser' : bin;
  const argv = asPostgresUser() ? ['-u', 'postgres', '--', bin, ...args] : args;
  const res = spawnSync(cmd, argv, { encoding: 'utf8', ...opts });
  if (res.status !== 0) {
    throw new Error(`${path.basename(bin)} failed (${res.status}): ${res.stderr || res.stdout}`);
  }
  return res.stdout;
}

/** `run` without blocking the event loop (for callers that keep working meanwhile). */
function runAsync(bin, args) {
  const cmd = asPostgresUser() ? 'runuser' : bin;
  const argv = asPostgresUser() ? ['-u', 'postgres', '--', bin, ...args] : args;
  return new Promise((resolve, reject) => {
    execFile(cmd, argv, { encoding: 'utf8' }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${path.basename(bin)} failed (${err.code}): ${stderr || stdout}`));
      else resolve(stdout);
    });
  });
}

/**
 * @param {{ settings?: Record<string,string|number>, label?: string }} [options]
 * @returns {Promise<{ url: string, port: number, dataDir: string, stop: () => void, restart: (mode?: string) => Promise<void> }>}
 */
async function startLocalPostgres(options = {}) {
  const bin = findBinDir();
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `pgqueue-${options.label ?? 'pg'}-`));
  if (asPostgresUser()) execFileSync('chown', ['postgres:postgres', dataDir]);
  run(path.join(bin, 'initdb'), ['-D', dataDir, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--no-locale', '--no-sync']);

  const port = await freePort();
  const settings = {
    listen_addresses: '127.0.0.1',
    port,
    unix_socket_directories: dataDir,
    max_connections: 300,
    shared_buffers: '256MB',
    ...options.settings,
  };
  const conf = Object.entries(settings).map(([k, v]) => `${k} = '${v}'`).join('\n');
  fs.appendFileSync(path.join(dataDir, 'postgresql.conf'), `\n${conf}\n`);
  run(path.join(bin, 'pg_ctl'), ['-D', dataDir, '-l', path.join(dataDir, 'server.log'), '-w', '-t', '60', 'start']);

  let stopped = false;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    try {
      run(path.join(bin, 'pg_ctl'), ['-D', dataDir, '-m', 'immediate', '-w', 'stop']);
    } catch {
      /* already gone */
    }
    fs.rmSync(dataDir, { recursive: true, force: true });
  };
  // Same port and data directory; `fast` (default) ends every session as an admin shutdown does.
  // Asynchronous: the clients in this process live through the outage instead of sleeping over it.
  const restart = async (mode = 'fast') => {
    await runAsync(path.join(bin, 'pg_ctl'), ['-D', dataDir, '-l', path.join(dataDir, 'server.log'), '-m', mode, '-w', '-t', '60', 'restart']);
  };
  return { url: `postgresql://postgres@127.0.0.1:${port}/postgres`, port, dataDir, stop, restart };
}

module.exports = { startLocalPostgres };
