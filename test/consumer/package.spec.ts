/**
 * The published package, proven outside this repo. Builds libs/pg-queue (`npm run build:lib`),
 * packs it, and for each row of the matrix creates a throwaway Nest app in the system temp dir
 * with its own package.json and Prisma schema, installs the tarball plus Nest, Prisma and
 * TypeScript from the npm registry, generates its Prisma client from the README's schema, type-checks
 * it in strict mode (with the README's ```ts blocks and compile-time type tests), and runs it as
 * CommonJS and as an ES module against a fresh database: enqueue with a business row in one
 * transaction, the handler writes, the app closes, the process exits 0 on its own. In the Prisma 7
 * apps it also runs the README's tests: its node:test file, and its Jest spec under each of its Jest
 * configs (ts-jest, @swc/jest) with the packages its install line pins, without --forceExit.
 *
 * Needs the npm registry (or a warm npm cache): an install that cannot reach it fails this test.
 */
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';

jest.setTimeout(8 * 60_000);

const ROOT = path.resolve(__dirname, '../..');
const LIB = path.join(ROOT, 'libs/pg-queue');
const FIXTURE = path.join(__dirname, 'app');
const NPM = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const KEEP = process.env.KEEP_CONSUMER_APPS === '1';

interface Variant {
  name: string;
  nest: string;
  prisma: 6 | 7;
  /** Installed next to the tarball, exact versions (`--save-exact`). */
  packages: string[];
  /** The README documents the Prisma 7 setup; its blocks are compiled in these apps. */
  readmeBlocks: boolean;
  /** Also type-check with `module: commonjs` + node10 resolution (deprecated in TypeScript 6, so 5.x apps only). */
  legacyResolution: boolean;
}

// terminus: the optional peer the README's health block (and @pg-queue/nestjs/health) needs.
const NEST_12 = ['@nestjs/common@12.5.1', '@nestjs/core@12.5.1', '@nestjs/terminus@12.1.0'];
const NEST_11 = ['@nestjs/common@11.2.10', '@nestjs/core@11.2.10', '@nestjs/terminus@11.1.1'];
/** For the README's Jest spec (`nest new` installs it in every app). */
const NEST_12_TESTING = '@nestjs/testing@12.1.1';
const NEST_11_TESTING = '@nestjs/testing@11.2.6';
const PRISMA_7 = ['@prisma/client@7.10.0', '@prisma/adapter-pg@7.10.1', 'prisma@7.10.1'];
// Prisma 6's adapter-pg declarations import 'pg' without depending on @types/pg (7's do): its users add it.
const PRISMA_6 = ['@prisma/client@6.19.3', '@prisma/adapter-pg@6.19.3', 'prisma@6.19.3', '@types/pg@8.23.1'];
// prom-client: the optional peer the README's metrics block (and @pg-queue/nestjs/metrics) needs.
const COMMON = ['reflect-metadata@0.2.2', 'rxjs@7.8.2', '@types/node@20.19.43', 'prom-client@15.1.3'];

const VARIANTS: Variant[] = [
  { name: 'nest12-prisma7', nest: '12', prisma: 7, packages: [...NEST_12, NEST_12_TESTING, ...PRISMA_7, ...COMMON, 'typescript@6.0.3'], readmeBlocks: true, legacyResolution: false },
  { name: 'nest11-prisma7', nest: '11', prisma: 7, packages: [...NEST_11, NEST_11_TESTING, ...PRISMA_7, ...COMMON, 'typescript@5.9.3'], readmeBlocks: true, legacyResolution: true },
  { name: 'nest11-prisma6', nest: '11', prisma: 6, packages: [...NEST_11, ...PRISMA_6, ...COMMON, 'typescript@5.9.3'], readmeBlocks: false, legacyResolution: true },
];

/** Where a surrounding `npm test` put its script and project variables; npm config (registry, cache, proxy) stays. */
const NPM_SCRIPT_VARS = /^(npm_(lifecycle|package|command|execpath|node_execpath)|npm_config_(local_prefix|prefix|global_prefix)$|INIT_CWD$)/i;

/** The environment of commands run in an app: npm must see the app as its project, not this repo. */
function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!NPM_SCRIPT_VARS.test(k)) env[k] = v;
  env.npm_config_update_notifier = 'false';
  return { ...env, ...extra };
}

/** `prisma generate` never runs Prisma's native engines, but its CLI downloads them first, which
 * fails offline: pointing these at any existing file skips the download (as scripts/prisma-generate.js
 * does). Engines the caller set win. Prisma 6 also wants the query engine library. */
function prismaGenerateEnv(databaseUrl: string): NodeJS.ProcessEnv {
  return childEnv({
    DATABASE_URL: databaseUrl,
    PRISMA_SCHEMA_ENGINE_BINARY: process.env.PRISMA_SCHEMA_ENGINE_BINARY ?? process.execPath,
    PRISMA_QUERY_ENGINE_LIBRARY: process.env.PRISMA_QUERY_ENGINE_LIBRARY ?? process.execPath,
    PRISMA_HIDE_UPDATE_MESSAGE: '1',
  });
}

function run(cmd: string, args: string[], opts: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number }): SpawnSyncReturns<string> {
  const started = Date.now();
  const res = spawnSync(cmd, args, {
    cwd: opts.cwd,
    env: opts.env ?? childEnv(),
    encoding: 'utf8',
    timeout: opts.timeoutMs ?? 5 * 60_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  const secs = ((Date.now() - started) / 1000).toFixed(1);
  if (res.error || res.status !== 0) {
    const why = res.error ? `${res.error.message}${res.signal ? ` (${res.signal})` : ''}` : `exit ${res.status}`;
    throw new Error(`\`${cmd} ${args.join(' ')}\` in ${opts.cwd} failed after ${secs} s: ${why}\n--- stdout\n${res.stdout}\n--- stderr\n${res.stderr}`);
  }
  const what = [cmd, ...args].map((a) => (path.isAbsolute(a) ? path.basename(a) : a)).slice(0, 4).join(' ');
  timings.push(`${path.basename(opts.cwd).replace(/-[A-Za-z0-9]{6}$/, '')}: ${what} … ${secs} s`);
  return res;
}

const timings: string[] = [];
const tempDirs: string[] = [];
const databases: string[] = [];

function tempDir(label: string): string {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), `pgqueue-${label}-`)));
  if (!path.relative(ROOT, dir).startsWith('..')) throw new Error(`temp dir ${dir} is inside the repo`);
  tempDirs.push(dir);
  return dir;
}

function serverUrl(): string {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('DATABASE_URL is not set: run with `node scripts/test.js test/consumer`');
  return url;
}

async function admin<T>(fn: (c: Client) => Promise<T>, database?: string): Promise<T> {
  const u = new URL(serverUrl());
  if (database) u.pathname = `/${database}`;
  const c = new Client({ connectionString: u.toString() });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** A fresh database with the consumer app's one business table (the app's own migration). */
async function createAppDatabase(): Promise<{ name: string; url: string }> {
  const name = `c_${randomBytes(6).toString('hex')}`;
  await admin((c) => c.query(`CREATE DATABASE ${name}`));
  databases.push(name);
  await admin(
    (c) =>
      c.query(`CREATE TABLE orders (
        id serial PRIMARY KEY,
        customer text NOT NULL,
        amount_cents integer NOT NULL DEFAULT 0,
        status text NOT NULL DEFAULT 'new',
        charge_id text UNIQUE,
        created_at timestamptz(6) NOT NULL DEFAULT now()
      )`),
    name,
  );
  const u = new URL(serverUrl());
  u.pathname = `/${name}`;
  return { name, url: u.toString() };
}

const README = path.join(LIB, 'README.md');

/** The connection budget's warning that the Prisma pool is smaller than the queue's work (worker/connection.budget.ts). */
const BUDGET_WARNING = /pool connections at once .* but the Prisma pool's max is \d+/;

/**
 * The app's Prisma schema: the README's (quick start), so the model its examples use and the one
 * these apps generate are one text. Prisma 6 adds the engine type and the datasource URL.
 */
function prismaSchema(major: 6 | 7): string {
  const block = /^```prisma\r?\n\/\/ prisma\/schema\.prisma\r?\n([\s\S]*?)^```/m.exec(fs.readFileSync(README, 'utf8'));
  if (!block) throw new Error('README: no ```prisma block that starts with `// prisma/schema.prisma`');
  if (major === 7) return block[1];
  const additions: [RegExp, string][] = [
    [/^ {2}moduleFormat = "cjs"$/m, '\n  engineType   = "client"'],
    [/^ {2}provider = "postgresql"$/m, '\n  url      = env("DATABASE_URL")'],
  ];
  return additions.reduce((schema, [line, added]) => {
    if (!line.test(schema)) throw new Error(`README's Prisma schema: no line ${line} to extend for Prisma 6`);
    return schema.replace(line, (found) => found + added);
  }, block[1]);
}

/** The README's ```ts blocks; one whose first line is `// src/<name>.ts` is written under that name. */
function readmeBlocks(markdown: string): { file: string; code: string }[] {
  const blocks: { file: string; code: string }[] = [];
  const fence = /^```ts\r?\n([\s\S]*?)^```/gm;
  for (let m = fence.exec(markdown); m; m = fence.exec(markdown)) {
    const code = m[1];
    const named = /^\/\/ src\/([\w.-]+\.ts)\s*$/m.exec(code.split('\n')[0]);
    blocks.push({ file: named ? named[1] : `readme-${blocks.length + 1}.ts`, code });
  }
  return blocks;
}

/** The README's ```js blocks that start with `// jest.config.cjs (<transformer>)`: each is the app's jest.config.cjs in turn. */
function readmeJestConfigs(markdown: string): { transformer: string; code: string }[] {
  const configs: { transformer: string; code: string }[] = [];
  const fence = /^```js\r?\n(\/\/ jest\.config\.cjs \(([^)]+)\)\r?\n[\s\S]*?)^```/gm;
  for (let m = fence.exec(markdown); m; m = fence.exec(markdown)) configs.push({ transformer: m[2], code: m[1] });
  return configs;
}

/** The `name@version` packages of the README's `npm install --save-dev jest@…` line, each an exact version. */
function readmeJestPackages(markdown: string): string[] {
  const line = /^npm install --save-dev (jest@.*)$/m.exec(markdown);
  if (!line) throw new Error('README: no `npm install --save-dev jest@…` line');
  const packages = line[1].trim().split(/\s+/);
  for (const p of packages) if (!/^(@[\w.-]+\/)?[\w.-]+@\d+\.\d+\.\d+$/.test(p)) throw new Error(`README's Jest install line: ${p} is not an exact version`);
  return packages;
}

function listFiles(dir: string, base = dir): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const full = path.join(dir, e.name);
    return e.isDirectory() ? listFiles(full, base) : [path.relative(base, full).split(path.sep).join('/')];
  });
}

/** Every package a built file requires, following its relative requires through the package. */
function requiredFrom(entry: string): Set<string> {
  const seen = new Set<string>();
  const packages = new Set<string>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    for (const [, , spec] of fs.readFileSync(file, 'utf8').matchAll(/require\((["'])([^"']+)\1\)/g)) {
      if (spec.startsWith('.')) {
        const target = path.resolve(path.dirname(file), spec);
        visit(fs.existsSync(`${target}.js`) ? `${target}.js` : path.join(target, 'index.js'));
      } else if (!spec.startsWith('node:')) {
        packages.add(spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]);
      }
    }
  };
  visit(entry);
  return packages;
}

interface Packed {
  tarball: string;
  size: number;
  unpackedSize: number;
  files: string[];
}

let packed: Packed;

beforeAll(() => {
  serverUrl();
  run(NPM, ['run', 'build:lib'], { cwd: ROOT });
  const out = tempDir('pack');
  const res = run(NPM, ['pack', '--json', '--pack-destination', out], { cwd: LIB });
  const [info] = JSON.parse(res.stdout) as { filename: string; size: number; unpackedSize: number; files: { path: string }[] }[];
  packed = {
    tarball: path.join(out, info.filename),
    size: info.size,
    unpackedSize: info.unpackedSize,
    files: info.files.map((f) => f.path).sort(),
  };
  console.log(`packed ${info.filename}: ${packed.files.length} files, ${(packed.size / 1024).toFixed(1)} kB (unpacked ${(packed.unpackedSize / 1024).toFixed(1)} kB)`);
});

afterAll(async () => {
  for (const db of databases) await admin((c) => c.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`)).catch(() => undefined);
  if (KEEP) console.log(`kept: ${tempDirs.join(' ')}`);
  else for (const dir of tempDirs) fs.rmSync(dir, { recursive: true, force: true });
  console.log(`consumer test steps:\n  ${timings.join('\n  ')}`);
});

describe('the packed tarball', () => {
  it('holds only dist (js, maps, declarations), the TypeScript sources the maps name, README, LICENSE and package.json', () => {
    const sources = listFiles(path.join(LIB, 'src')).filter((f) => f.endsWith('.ts') && !f.endsWith('.spec.ts') && !f.endsWith('.d.ts'));
    const expected = [
      'LICENSE',
      'README.md',
      'package.json',
      ...sources.flatMap((f) => {
        const js = `dist/${f.replace(/\.ts$/, '')}`;
        return [`${js}.js`, `${js}.js.map`, `${js}.d.ts`, `src/${f}`];
      }),
    ].sort();
    expect(packed.files).toEqual(expected);
    expect(packed.files).toEqual(expect.arrayContaining(['dist/index.js', 'dist/index.d.ts', 'dist/testing/index.js', 'dist/testing/index.d.ts']));
  });

  it('maps every built file to a TypeScript source in the tarball, without inlined copies (sourcesContent)', () => {
    const maps = packed.files.filter((f) => f.endsWith('.js.map'));
    expect(maps.length).toBeGreaterThan(0);
    const named = new Set<string>();
    for (const file of maps) {
      const map = JSON.parse(fs.readFileSync(path.join(LIB, file), 'utf8')) as { file: string; sourceRoot?: string; sources: string[]; sourcesContent?: unknown };
      const js = file.replace(/\.map$/, '');
      const sources = map.sources.map((source) => path.posix.normalize(path.posix.join(path.posix.dirname(file), map.sourceRoot ?? '', source)));
      expect({ file, names: map.file, sources, inlined: map.sourcesContent !== undefined }).toEqual({
        file,
        names: path.posix.basename(js),
        sources: [`src/${js.slice('dist/'.length).replace(/\.js$/, '.ts')}`],
        inlined: false,
      });
      for (const source of sources) {
        expect(packed.files).toContain(source);
        named.add(source);
      }
      expect(fs.readFileSync(path.join(LIB, js), 'utf8').trimEnd().endsWith(`//# sourceMappingURL=${path.posix.basename(file)}`)).toBe(true);
    }
    // and no other source ships: src/ is exactly what the maps name
    expect(packed.files.filter((f) => f.startsWith('src/'))).toEqual([...named].sort());
  });

  it('declares what the built code requires, and requires nothing outside itself', () => {
    const manifest = JSON.parse(fs.readFileSync(path.join(LIB, 'package.json'), 'utf8'));
    const rootManifest = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
    const declared = new Set([...Object.keys(manifest.dependencies), ...Object.keys(manifest.peerDependencies)]);
    const required = new Set<string>();
    for (const file of packed.files.filter((f) => f.endsWith('.js'))) {
      const code = fs.readFileSync(path.join(LIB, file), 'utf8');
      for (const [, , spec] of code.matchAll(/require\((["'])([^"']+)\1\)/g)) {
        if (spec.startsWith('.')) {
          const target = path.resolve(path.dirname(path.join(LIB, file)), spec);
          expect(path.relative(path.join(LIB, 'dist'), target).startsWith('..')).toBe(false);
        } else if (!spec.startsWith('node:')) {
          required.add(spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]);
        }
      }
    }
    for (const dep of required) expect(declared).toContain(dep);
    // Optional peers: @opentelemetry/api, required lazily (observability/tracing.ts); @nestjs/terminus,
    // required only by the @pg-queue/nestjs/health entry point.
    expect([...required].sort()).toEqual(['@nestjs/common', '@nestjs/core', '@nestjs/terminus', '@opentelemetry/api', 'commander', 'croner', 'pg', 'pg-listen', 'prom-client', 'rxjs']);
    for (const peer of ['@opentelemetry/api', '@nestjs/terminus']) expect(manifest.peerDependenciesMeta?.[peer]).toEqual({ optional: true });
    // pg is not required directly: pg-listen needs it as a peer, and it is the driver the queue's LISTEN uses.
    // pg is a peer: the app's driver adapter brings it, and LISTEN uses that copy, not a second one.
    expect(Object.keys(manifest.dependencies).sort()).toEqual(['commander', 'croner', 'pg-listen']);
    expect(manifest.peerDependencies.pg).toBeDefined();
    // The root and /testing entries load no optional peer (an app that uses none installs none): only
    // the guarded, lazy require of @opentelemetry/api is reachable from them.
    const optional = Object.keys(manifest.peerDependenciesMeta ?? {});
    for (const entry of ['dist/index.js', 'dist/testing/index.js']) {
      expect({ entry, optionalPeers: [...requiredFrom(path.join(LIB, entry))].filter((d) => optional.includes(d)).sort() }).toEqual({ entry, optionalPeers: ['@opentelemetry/api'] });
    }
    for (const [entry, peer] of [['dist/metrics/index.js', 'prom-client'], ['dist/health/index.js', '@nestjs/terminus']]) {
      expect(requiredFrom(path.join(LIB, entry))).toContain(peer);
    }
    // Caret ranges whose floor is the version this repository tests with.
    for (const [dep, version] of Object.entries(manifest.dependencies)) expect(version).toBe(`^${rootManifest.dependencies[dep]}`);
    // The entry points and the CLI exist in the tarball.
    for (const target of [manifest.main, manifest.types, ...Object.values(manifest.bin as Record<string, string>)]) {
      expect(packed.files).toContain(path.posix.normalize(target));
    }
    for (const entry of Object.values(manifest.exports as Record<string, string | Record<string, string>>)) {
      for (const target of typeof entry === 'string' ? [entry] : Object.values(entry)) expect([...packed.files, 'package.json']).toContain(path.posix.normalize(target));
    }
    for (const bin of ['pg-queue', 'pg-queue-schema']) expect(fs.readFileSync(path.join(LIB, manifest.bin[bin]), 'utf8').startsWith('#!/usr/bin/env node\n')).toBe(true);
  });
});

describe.each(VARIANTS)('a fresh app: $name', (variant) => {
  let app: string;
  let db: { name: string; url: string };
  let blocks: { file: string; code: string }[] = [];
  let jestConfigs: { transformer: string; code: string }[] = [];
  let jestPackages: string[] = [];

  beforeAll(async () => {
    app = tempDir(`consumer-${variant.name}`);
    db = await createAppDatabase();
    fs.writeFileSync(
      path.join(app, 'package.json'),
      `${JSON.stringify({ name: `pgqueue-consumer-${variant.name}`, version: '0.0.0', private: true, license: 'UNLICENSED' }, null, 2)}\n`,
    );
    for (const config of ['tsconfig.json', 'tsconfig.node10.json']) fs.cpSync(path.join(FIXTURE, config), path.join(app, config));
    fs.cpSync(path.join(FIXTURE, 'src'), path.join(app, 'src'), { recursive: true });
    fs.cpSync(path.join(FIXTURE, `prisma${variant.prisma}`, 'prisma.ts'), path.join(app, 'src', 'prisma.ts'));
    fs.mkdirSync(path.join(app, 'prisma'));
    fs.writeFileSync(path.join(app, 'prisma', 'schema.prisma'), prismaSchema(variant.prisma));
    if (variant.readmeBlocks) {
      const markdown = fs.readFileSync(README, 'utf8');
      blocks = readmeBlocks(markdown);
      jestConfigs = readmeJestConfigs(markdown);
      jestPackages = readmeJestPackages(markdown);
      fs.cpSync(path.join(FIXTURE, 'readme'), path.join(app, 'src'), { recursive: true });
      for (const block of blocks) {
        const target = path.join(app, 'src', block.file);
        if (fs.existsSync(target)) throw new Error(`README block ${block.file} would overwrite a file of the consumer app`);
        fs.writeFileSync(target, block.code);
      }
    }

    // One install: the tarball, and everything else from the registry (or npm's cache of it).
    try {
      run(NPM, ['install', '--no-audit', '--no-fund', '--prefer-offline', '--save-exact', packed.tarball, ...variant.packages, ...jestPackages], {
        cwd: app,
        timeoutMs: 6 * 60_000,
      });
    } catch (err) {
      throw new Error(`npm install from the npm registry failed: this test needs the registry (or a warm npm cache)\n${(err as Error).message}`);
    }
    run(process.execPath, [path.join(app, 'node_modules/prisma/build/index.js'), 'generate'], { cwd: app, env: prismaGenerateEnv(db.url) });
  });

  it('installed the package with its own dependencies and nothing of this repo', () => {
    const installed = path.join(app, 'node_modules/@pg-queue/nestjs');
    expect(fs.lstatSync(installed).isSymbolicLink()).toBe(false);
    expect(listFiles(installed).sort()).toEqual(packed.files);
    // pg through the app's @prisma/adapter-pg; prom-client because this app installs it (the README's metrics block)
    for (const dep of ['pg', 'pg-listen', 'croner', 'prom-client']) {
      expect(fs.existsSync(path.join(app, 'node_modules', dep, 'package.json'))).toBe(true);
    }
    const nest = JSON.parse(fs.readFileSync(path.join(app, 'node_modules/@nestjs/core/package.json'), 'utf8'));
    expect(nest.version.split('.')[0]).toBe(variant.nest);
    const client = JSON.parse(fs.readFileSync(path.join(app, 'node_modules/@prisma/client/package.json'), 'utf8'));
    expect(client.version.split('.')[0]).toBe(String(variant.prisma));
  });

  it('type-checks in strict mode, with the user\'s own payload and Prisma types' + (variant.readmeBlocks ? ' and every README block' : ''), () => {
    if (variant.readmeBlocks) {
      // Every TypeScript or JavaScript fence of the README is one of the compiled blocks or one of the
      // Jest configs the Jest test below runs.
      const fences = fs.readFileSync(README, 'utf8').match(/^```(ts|typescript|tsx|js|javascript)\b/gm) ?? [];
      expect(blocks.length).toBeGreaterThanOrEqual(8);
      expect(fences).toHaveLength(blocks.length + jestConfigs.length);
    }
    run(process.execPath, [path.join(app, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json', '--noEmit'], { cwd: app });
  });

  if (variant.legacyResolution) {
    it('type-checks with `"module": "commonjs"` and classic node resolution too (older Nest app layout)', () => {
      run(process.execPath, [path.join(app, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.node10.json', '--noEmit'], { cwd: app });
    });
  }

  it('runs as CommonJS: outbox enqueue, the handler writes, the app closes and the process exits 0', async () => {
    // Emit (the check above already passed); skipLibCheck only to save time.
    run(process.execPath, [path.join(app, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json', '--skipLibCheck'], { cwd: app });
    const res = run(process.execPath, ['dist/main.js'], { cwd: app, env: childEnv({ DATABASE_URL: db.url }), timeoutMs: 60_000 });
    const result = JSON.parse(/^RESULT (.*)$/m.exec(res.stdout)![1]);
    expect(result).toMatchObject({ format: 'cjs', status: 'shipped', taskState: 'done', drained: 0, orders: 1, eventTaskId: result.taskId });
    expect(result.schemaSqlBytes).toBeGreaterThan(1000);
    // The rolled-back transaction left no task; the completed one was archived.
    const [live, archived] = await admin(
      async (c) => [(await c.query('SELECT count(*)::int AS n FROM pgqueue.task')).rows[0].n, (await c.query("SELECT count(*)::int AS n FROM pgqueue.task_archive WHERE state = 'done'")).rows[0].n],
      db.name,
    );
    expect({ live, archived }).toEqual({ live: 0, archived: 1 });
      // The README names the tables the queue owns (partitions of task_archive aside), and counts them right.
    const owned = /^The queue owns ([\w-]+) tables in its schema \(([^)]*)\)/m.exec(fs.readFileSync(README, 'utf8'));
    const named = [...new Set([...(owned?.[2] ?? '').matchAll(/`(\w+)`/g)].map((m) => m[1]))].sort();
    const tables = await admin(
      async (c) => (await c.query("SELECT relname FROM pg_class WHERE relnamespace = 'pgqueue'::regnamespace AND relkind IN ('r', 'p') AND NOT relispartition ORDER BY relname")).rows.map((r) => r.relname as string),
      db.name,
    );
    const ones = ['zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine', 'ten', 'eleven', 'twelve', 'thirteen', 'fourteen', 'fifteen', 'sixteen', 'seventeen', 'eighteen', 'nineteen'];
    const words = [...ones, 'twenty', ...ones.slice(1, 10).map((w) => `twenty-${w}`)];
    expect({ count: owned?.[1], named }).toEqual({ count: words[tables.length], named: tables });
  });

  it('runs as an ES module through Node\'s CommonJS interop (root and /testing entry points)', async () => {
    const res = run(process.execPath, ['dist/esm-main.mjs'], { cwd: app, env: childEnv({ DATABASE_URL: db.url }), timeoutMs: 60_000 });
    const result = JSON.parse(/^RESULT (.*)$/m.exec(res.stdout)![1]);
    expect(result).toMatchObject({ format: 'esm', drained: 1, status: 'shipped-esm', taskState: 'done' });
    const orders = await admin(async (c) => (await c.query('SELECT customer, status FROM orders ORDER BY id')).rows, db.name);
    expect(orders).toEqual([
      { customer: 'ada', status: 'shipped' },
      { customer: 'grace', status: 'shipped-esm' },
    ]);
  });

  it('ships the pg-queue CLI, with --help, and pg-queue-schema as before', () => {
    const res = run(path.join(app, 'node_modules/.bin/pg-queue-schema'), ['app_queue'], { cwd: app });
    expect(res.stdout).toContain('CREATE TABLE "app_queue".task (');
    expect(res.stdout).toContain('INSERT INTO "app_queue".schema_version');
    expect(run(path.join(app, 'node_modules/.bin/pg-queue'), ['--help'], { cwd: app }).stdout).toMatch(/^Usage: pg-queue \[options\] \[command\]\n[\s\S]*Exit codes:/);
    expect(run(path.join(app, 'node_modules/.bin/pg-queue-schema'), ['--help'], { cwd: app }).stdout).toMatch(/^Usage: pg-queue schema print \[options\]/);
    // The package README's migration commands, exactly as written, in the app: SQL only in the file.
    const readme = fs.readFileSync(path.join(LIB, 'README.md'), 'utf8');
    const commands = ['mkdir -p prisma/migrations/20260101000000_pgqueue', 'npx --no-install pg-queue schema print --schema pgqueue > prisma/migrations/20260101000000_pgqueue/migration.sql'];
    expect(readme).toContain(commands.join('\n'));
    run('sh', ['-c', commands.join(' && ')], { cwd: app });
    const sql = fs.readFileSync(path.join(app, 'prisma/migrations/20260101000000_pgqueue/migration.sql'), 'utf8');
    expect(sql.split('\n')[0]).toBe('-- pg-queue schema "pgqueue"');
    expect(sql).toContain('CREATE TABLE "pgqueue".task (');
  });

  it('maps a stack trace through the package to its shipped TypeScript source (node --enable-source-maps)', () => {
    // A bad queue name throws in the decorator: the frames inside the package must name .ts files
    // that exist in node_modules, and the first must be the line that throws.
    fs.writeFileSync(path.join(app, 'stack.js'), "try { require('@pg-queue/nestjs').TaskHandler('not a queue name!'); } catch (err) { console.log(err.stack); }\n");
    const res = run(process.execPath, ['--enable-source-maps', 'stack.js'], { cwd: app });
    const pkg = path.join(app, 'node_modules/@pg-queue/nestjs');
    const frames = [...res.stdout.matchAll(/\((\/[^()]+):(\d+):\d+\)$/gm)].filter(([, file]) => file.startsWith(`${pkg}/`));
    expect(res.stdout).toMatch(/^InvalidQueueNameError: /);
    expect(frames.length).toBeGreaterThan(0);
    for (const [, file] of frames) expect({ file: path.relative(pkg, file), exists: fs.existsSync(file) }).toEqual({ file: expect.stringMatching(/^src\/.*\.ts$/), exists: true });
    const [, thrower, line] = frames[0];
    expect(fs.readFileSync(thrower, 'utf8').split('\n')[Number(line) - 1]).toContain('throw new InvalidQueueNameError');
  });

  if (variant.readmeBlocks) it('runs the README: its listed handler defaults are the real ones, and its test passes (node --test)', async () => {
    const check = run(process.execPath, ['dist/readme-check.js'], { cwd: app, timeoutMs: 60_000 });
    expect(check.stdout).toContain('RESULT {"handlerDefaults":"match"}');
    // The README's quick start (PrismaService, AppModule) under the README's own test.
    const res = run(process.execPath, ['--test', 'dist/orders.test.js'], { cwd: app, env: childEnv({ DATABASE_URL: db.url }), timeoutMs: 90_000 });
    // The quick start's pool fits its queue: the connection budget does not warn at startup.
    expect(`${res.stdout}\n${res.stderr}`).not.toMatch(BUDGET_WARNING);
    expect(res.stdout).toMatch(/# pass 1\b/);
    expect(res.stdout).toMatch(/# fail 0\b/);
    const confirmed = await admin(async (c) => (await c.query("SELECT count(*)::int AS n FROM orders WHERE status = 'confirmed'")).rows[0].n, db.name);
    expect(confirmed).toBe(1);
  });

  if (variant.readmeBlocks) it('runs the README\'s Jest spec under each of its Jest configs (ts-jest, @swc/jest), and Jest exits by itself', async () => {
    expect(jestConfigs.map((c) => c.transformer)).toEqual(['ts-jest', '@swc/jest']);
    const confirmed = async (): Promise<number> => admin(async (c) => (await c.query("SELECT count(*)::int AS n FROM orders WHERE status = 'confirmed'")).rows[0].n, db.name);
    // The user's shell, not this Jest worker's: no JEST_WORKER_ID.
    const env = childEnv({ DATABASE_URL: db.url });
    delete env.JEST_WORKER_ID;
    for (const { transformer, code } of jestConfigs) {
      // A leak must show, not be cut off.
      expect(code).not.toMatch(/forceExit|detectOpenHandles/);
      fs.writeFileSync(path.join(app, 'jest.config.cjs'), code);
      const before = await confirmed();
      // `npx jest` as the README says, minus npx; the timeout only ends a Jest that hangs.
      const started = Date.now();
      const res = spawnSync(path.join(app, 'node_modules/.bin/jest'), [], { cwd: app, env, encoding: 'utf8', timeout: 90_000, maxBuffer: 64 * 1024 * 1024 });
      timings.push(`${path.basename(app).replace(/-[A-Za-z0-9]{6}$/, '')}: jest (${transformer}) … ${((Date.now() - started) / 1000).toFixed(1)} s`);
      const output = `${res.stdout}\n${res.stderr}`.replace(/\u001b\[[0-9;]*m/g, ''); // colours, if this run has them
      const tests = /^Tests:\s+(.*)$/m.exec(output)?.[1];
      const outcome = {
        transformer,
        status: res.status,
        signal: res.signal,
        tests,
        didNotExit: output.includes('did not exit one second after the test run'),
        openHandle: /open handle/i.test(output),
      };
      if (res.status !== 0 || outcome.didNotExit || outcome.openHandle) console.log(`jest (${transformer}) in ${app}:\n${output}`);
      // The spec's two tests: the quick start drains its order, and an init that fails on a bad cron.
      expect(outcome).toEqual({ transformer, status: 0, signal: null, tests: '2 passed, 2 total', didNotExit: false, openHandle: false });
      expect(await confirmed()).toBe(before + 1);
    }
  });
});

/**
 * The README's recipes in an app that the Nest CLI's own `nest new` wrote (its templates: Nest 11's
 * is CommonJS and tested with Jest, Nest 12's is an ES module tested with Vitest), with the peers
 * installed as the README's install lines say, unpinned where they are: the README's Prisma set-up
 * (`prisma init`, its schema, `prisma generate`), its build advice, and its Jest recipe verbatim.
 */
const SCAFFOLDS = [
  { nest: '11', cli: '@nestjs/cli@11', build: true },
  // Nest 12's app is an ES module: the README's blocks import without `.js`, so `nest build` is not run there.
  { nest: '12', cli: '@nestjs/cli@12', build: false },
];

/** The `npm install` lines of the README's Install block besides the tarball's: name → version (`latest` when unpinned), and whether --save-dev. */
function readmeInstalls(markdown: string): { deps: Record<string, string>; devDeps: Record<string, string> } {
  const install = /^## Install\r?\n[\s\S]*?^```bash\r?\n([\s\S]*?)^```/m.exec(markdown);
  if (!install) throw new Error('README: no ```bash block under ## Install');
  const deps: Record<string, string> = {};
  const devDeps: Record<string, string> = {};
  const lines = [...install[1].matchAll(/^npm install (.*)$/gm)].map((m) => m[1]);
  const jest = /^npm install (--save-dev jest@.*)$/m.exec(markdown);
  for (const line of [...lines, ...(jest ? [jest[1]] : [])]) {
    const words = line.trim().split(/\s+/);
    const into = words.includes('--save-dev') ? devDeps : deps;
    for (const word of words) {
      if (word.startsWith('-') || word.endsWith('.tgz')) continue;
      const at = word.lastIndexOf('@');
      if (at > 0) into[word.slice(0, at)] = word.slice(at + 1);
      else into[word] = 'latest';
    }
  }
  return { deps, devDeps };
}

describe.each(SCAFFOLDS)('an app that `nest new` wrote: Nest $nest', (scaffold) => {
  let app: string;
  let db: { name: string; url: string };
  let markdown: string;

  beforeAll(async () => {
    markdown = fs.readFileSync(README, 'utf8');
    const parent = tempDir(`nest${scaffold.nest}-new`);
    db = await createAppDatabase();
    // The CLI's own template; installing is left to the one install below (faster than two).
    run('npx', ['-y', '-p', scaffold.cli, 'nest', 'new', 'app', '--skip-git', '--skip-install', '--package-manager', 'npm'], { cwd: parent });
    app = path.join(parent, 'app');
    const manifestPath = path.join(app, 'package.json');
    const manifest = JSON.parse(fs.readFileSync(manifestPath, 'utf8'));
    const { deps, devDeps } = readmeInstalls(markdown);
    manifest.dependencies = { ...manifest.dependencies, '@pg-queue/nestjs': `file:${packed.tarball}`, ...deps };
    manifest.devDependencies = { ...manifest.devDependencies, ...devDeps };
    // "delete the `"jest"` key that `nest new` wrote into package.json"
    delete manifest.jest;
    fs.writeFileSync(manifestPath, `${JSON.stringify(manifest, null, 2)}\n`);
    try {
      run(NPM, ['install', '--no-audit', '--no-fund', '--prefer-offline'], { cwd: app, timeoutMs: 8 * 60_000 });
    } catch (err) {
      throw new Error(`npm install from the npm registry failed: this test needs the registry (or a warm npm cache)\n${(err as Error).message}`);
    }
    // Prisma as the README sets it up: `prisma init`, the README's schema, `prisma generate`.
    run(process.execPath, [path.join(app, 'node_modules/prisma/build/index.js'), 'init'], { cwd: app, env: prismaGenerateEnv(db.url) });
    fs.writeFileSync(path.join(app, 'prisma', 'schema.prisma'), prismaSchema(7));
    run(process.execPath, [path.join(app, 'node_modules/prisma/build/index.js'), 'generate'], { cwd: app, env: prismaGenerateEnv(db.url) });
    // The quick start's files replace the template's module; its other files stay.
    for (const block of readmeBlocks(markdown)) {
      if (['prisma.service.ts', 'app.module.ts', 'orders.spec.ts', 'health.controller.ts'].includes(block.file)) fs.writeFileSync(path.join(app, 'src', block.file), block.code);
    }
    fs.cpSync(path.join(FIXTURE, 'scaffold'), path.join(app, 'src'), { recursive: true });
  });

  it('has the Prisma config file where the README says `prisma init` writes it', () => {
    const named = /the database URL's config in\s+`([\w.]+)`/.exec(markdown)?.[1];
    expect(named).toBeDefined();
    expect(fs.existsSync(path.join(app, named!))).toBe(true);
  });

  if (scaffold.build) it('builds with `nest build` into dist/main.js, with the README\'s tsconfig.build.json', () => {
    const block = /^```jsonc\r?\n\/\/ tsconfig\.build\.json[^\n]*\n([\s\S]*?)^```/m.exec(markdown);
    expect(block).not.toBeNull();
    const template = JSON.parse(fs.readFileSync(path.join(app, 'tsconfig.build.json'), 'utf8'));
    const readme = JSON.parse(block![1]);
    // The README's is the template's, plus the Prisma config.
    expect(readme.exclude).toEqual(expect.arrayContaining(template.exclude));
    fs.writeFileSync(path.join(app, 'tsconfig.build.json'), block![1]);
    run(path.join(app, 'node_modules/.bin/nest'), ['build'], { cwd: app });
    expect(fs.existsSync(path.join(app, 'dist/main.js'))).toBe(true);
  });

  it('runs the README\'s Jest spec, and its health block, under each of its Jest configs, and Jest exits by itself', () => {
    const configs = readmeJestConfigs(markdown);
    expect(configs.map((c) => c.transformer)).toEqual(['ts-jest', '@swc/jest']);
    const env = childEnv({ DATABASE_URL: db.url });
    delete env.JEST_WORKER_ID;
    const outcomes = configs.map(({ transformer, code }) => {
      fs.writeFileSync(path.join(app, 'jest.config.cjs'), code);
      const started = Date.now();
      const res = spawnSync(path.join(app, 'node_modules/.bin/jest'), ['--ci'], { cwd: app, env, encoding: 'utf8', timeout: 120_000, maxBuffer: 64 * 1024 * 1024 });
      timings.push(`nest${scaffold.nest}-new: jest (${transformer}) … ${((Date.now() - started) / 1000).toFixed(1)} s`);
      const output = `${res.stdout}\n${res.stderr}`.replace(/\u001b\[[0-9;]*m/g, '');
      if (res.status !== 0) console.log(`jest (${transformer}) in ${app}:\n${output}`);
      return {
        transformer,
        status: res.status,
        failed: /^Tests:.*\b(\d+) failed/m.exec(output)?.[1] ?? null,
        // the README's two, the health check, and the template's own spec
        passed: Number(/^Tests:.*?\b(\d+) passed/m.exec(output)?.[1] ?? 0) >= 3,
        didNotExit: output.includes('did not exit one second after the test run'),
      };
    });
    expect(outcomes).toEqual(configs.map(({ transformer }) => ({ transformer, status: 0, failed: null, passed: true, didNotExit: false })));
  });
});
