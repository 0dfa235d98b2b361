// The bench's machinery: the PostgreSQL server (a throwaway local cluster unless DATABASE_URL),
// one database per run, one child process per run with a hard deadline, the machine's description,
// and the cleanup that leaves no child, database or cluster behind.
'use strict';

const { fork, execFileSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Client } = require('pg');
const { startLocalPostgres } = require('../scripts/local-postgres');
const { env } = require('./config');

const ROOT = path.resolve(__dirname, '..');

// Database plumbing.

let pg = null; // local cluster, when started here
let adminUrl = env.DATABASE_URL;
let currentChild = null;
const liveDatabases = new Set();

function dbUrl(name) {
  const u = new URL(adminUrl);
  u.pathname = `/${name}`;
  return u.toString();
}

async function sql(text, values) {
  const c = new Client({ connectionString: adminUrl });
  await c.connect();
  try {
    return (await c.query(text, values)).rows;
  } finally {
    await c.end();
  }
}

async function createDatabase(name, template) {
  liveDatabases.add(name);
  await sql(template ? `CREATE DATABASE ${name} TEMPLATE ${template} STRATEGY FILE_COPY` : `CREATE DATABASE ${name}`);
}

async function dropDatabase(name) {
  await sql(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  liveDatabases.delete(name);
}

function dbName(parts) {
  return `bench_${parts.join('_')}_${crypto.randomBytes(3).toString('hex')}`.replace(/[^a-z0-9_]/g, '_').slice(0, 63);
}

/** Runs one child with a hard deadline; resolves with its result (never rejects). */
function runChild(spec, hardMs) {
  return new Promise((resolve) => {
    const child = fork(path.join(__dirname, 'child.js'), [JSON.stringify(spec)], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
    currentChild = child;
    let result = null;
    let output = '';
    const keep = (chunk) => {
      output = (output + chunk).slice(-4000);
      process.stderr.write(chunk.toString().replace(/^/gm, '      | '));
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    child.on('message', (m) => (result = m));
    const timer = setTimeout(() => {
      result = { ok: false, metrics: {}, notes: [], error: `killed after the hard limit of ${Math.round(hardMs / 1000)} s` };
      child.kill('SIGKILL');
    }, hardMs);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      currentChild = null;
      resolve(result ?? { ok: false, metrics: {}, notes: [], error: `child exited (${signal ?? code}) without a result: ${output.trim().split('\n').slice(-3).join(' / ')}` });
    });
  });
}

// ---------------------------------------------------------------------------------------------

function machine(pgVersion, settings) {
  const cpu = (() => {
    try {
      const m = fs.readFileSync('/proc/cpuinfo', 'utf8').match(/^model name\s*:\s*(.+)$/m);
      return m ? m[1].trim() : os.cpus()[0]?.model ?? 'unknown';
    } catch {
      return os.cpus()[0]?.model ?? 'unknown';
    }
  })();
  let nproc = os.cpus().length;
  try {
    nproc = Number(execFileSync('nproc', { encoding: 'utf8' }).trim());
  } catch {
    /* os.cpus() then */
  }
  const version = (pkg) => {
    try {
      return JSON.parse(fs.readFileSync(path.join(ROOT, 'node_modules', pkg, 'package.json'), 'utf8')).version;
    } catch {
      return '?';
    }
  };
  const benchEnv = Object.keys(env)
    .filter((k) => k.startsWith('BENCH_') && k !== 'BENCH_NOTE') // the note is saved beside the command
    .sort()
    .map((k) => `${k}=${env[k]}`);
  return {
    cpu,
    nproc,
    memGiB: (os.totalmem() / 2 ** 30).toFixed(1),
    node: process.version,
    postgres: pgVersion,
    settings,
    versions: { 'pg-boss': version('pg-boss'), 'graphile-worker': version('graphile-worker'), bullmq: version('bullmq'), '@dbos-inc/dbos-sdk': version('@dbos-inc/dbos-sdk'), '@dbos-inc/prisma-datasource': version('@dbos-inc/prisma-datasource'), '@prisma/client': version('@prisma/client'), '@prisma/adapter-pg': version('@prisma/adapter-pg'), pg: version('pg'), '@nestjs/core': version('@nestjs/core') },
    command: [...benchEnv, 'npm run bench'].join(' '),
    database: pg ? 'throwaway local cluster started by the bench (scripts/local-postgres.js)' : 'DATABASE_URL',
  };
}

function log(msg) {
  process.stderr.write(`${msg}\n`);
}

/** Starts the throwaway cluster, unless DATABASE_URL names a server. */
async function startDatabase() {
  if (!adminUrl) {
    pg = await startLocalPostgres({ label: 'bench', settings: { shared_preload_libraries: 'pg_stat_statements' } });
    adminUrl = pg.url;
    log(`database: throwaway local PostgreSQL on 127.0.0.1:${pg.port} (set DATABASE_URL to use your own)`);
  } else {
    log('database: DATABASE_URL');
  }
}

// Whatever happens, no child and no cluster outlive the bench.
let cleaning = false;
async function cleanup() {
  if (cleaning) return;
  cleaning = true;
  if (currentChild) currentChild.kill('SIGKILL');
  if (pg) {
    pg.stop();
    pg = null;
  } else if (adminUrl) {
    for (const name of [...liveDatabases]) await dropDatabase(name).catch(() => undefined);
  }
}

process.on('exit', () => {
  if (currentChild) currentChild.kill('SIGKILL');
  if (pg) pg.stop();
});

module.exports = { log, startDatabase, adminUrl: () => adminUrl, dbUrl, sql, createDatabase, dropDatabase, dbName, runChild, machine, cleanup };
