import { Logger } from '@nestjs/common';
import { PgQueueError } from '../errors';
import type { PrismaClientLike, SqlExecutor } from '../types';
import { prismaPoolMax } from '../prisma-adapter';
import { isLockTimeout } from './database-error';
import { quoteIdent } from './identifiers';
import { migrationStepPlans, schemaBootstrapSql, schemaMigrations, type SchemaMigration, type StepMode } from './schema.sql';
import { runConcurrently } from './schema.index-builds';
import { runtimeFunctions, type RuntimeFunction } from './runtime-functions';
import { syncRuntimeFunctions } from './schema.runtime-functions';
import { splitSqlScript } from './sql-script';

/** Statement bound of an ordinary step: catalog changes, index builds on a fresh install. */
const STEP_STATEMENT_TIMEOUT = '60s';

export interface InstallOptions {
  /**
   * How long a step's DDL waits for a table lock (lock_timeout) before the step gives up, rolls
   * back and is tried again. While a DDL waits for ACCESS EXCLUSIVE, every statement of the fleet
   * on that table queues behind it: this bounds that stall. Default 3000.
   */
  lockTimeoutMs?: number;
  /** Tries of a step whose locks time out before installSchema fails. Default 10. */
  maxTries?: number;
  /** Pause after the first lock timeout, doubled after each further one, at most 5 s. Default 250. */
  backoffMs?: number;
  /**
   * Bound of a `long` step (a VALIDATE scan), of a `concurrently` one, and of the wait for another
   * instance's upgrade step. Default 6 hours.
   */
  longStepTimeoutMs?: number;
  /**
   * How long a CONCURRENTLY index build may wait for older transactions (it waits for every
   * transaction that could still use the table without the index; writes are not held back
   * meanwhile) before it is cancelled and installSchema fails. Default 10 minutes.
   */
  concurrentLockWaitMs?: number;
  /** Where progress, retries and unfinished upgrades are reported. Default: Nest's Logger('PgQueue'). */
  logger?: { log(message: string): void; warn(message: string): void };
  /** For tests: the functions put in place once the schema is current. Default: the library's. */
  runtimeFunctions?: readonly RuntimeFunction[];
}

type Resolved = Required<InstallOptions>;

/** The step a transaction is running, for the retry messages and the undo of a failed transient step. */
interface CurrentStep {
  migration: SchemaMigration;
  /** 0-based: the steps committed before it. */
  index: number;
  of: number;
  run: StepMode;
}

/** What the installer's transaction is doing: a migration's step, or `what` else. */
type At = { step: CurrentStep | null; what?: string };

type Outcome = { kind: 'busy' } | { kind: 'current' } | { kind: 'undone' } | { kind: 'step'; version: number; finished: boolean };

interface RunState {
  /** The database had no schema_version row when this run began: every table is new and empty. */
  fresh: boolean | null;
  /** Versions whose unfinished state this run already reported, or made itself. */
  known: Set<number>;
  poolOfOne: boolean;
}

/**
 * Creates or upgrades the queue schema, one migration step per transaction: each takes the
 * advisory lock, reads `schema_version`, runs the first step not yet recorded and records it
 * (`steps_done` while its migration is unfinished). So any number of instances can start at once
 * (they take turns: one that finds the lock taken polls until it is free, and each step runs once),
 * an interrupted migration resumes at its next step (reported at startup), and no step holds the
 * locks of the one before. Resolves when the schema is current, with the versions this call completed.
 *
 * Steps cannot stop the fleet: each waits for its locks at most `lockTimeoutMs`, then rolls back
 * and is retried after a pause, `maxTries` times in all, then installSchema fails with the step's
 * name; `long` steps (VALIDATE) run without a transaction or statement timeout; `concurrently`
 * steps build or drop an index CONCURRENTLY outside the transaction, while it holds the advisory
 * lock. A migration's `transient` state (migration 11's CHECK) is undone when a step in it fails.
 * The transaction that finds the schema current also puts the runtime functions in place
 * (schema.runtime-functions.ts), under the same lock, lock_timeout and retries.
 *
 * `migrations` is for tests; by default the library's own.
 */
export async function installSchema(
  prisma: PrismaClientLike,
  schema: string,
  migrations: SchemaMigration[] = schemaMigrations(schema),
  options: InstallOptions = {},
): Promise<number[]> {
  const o: Resolved = {
    lockTimeoutMs: options.lockTimeoutMs ?? 3000,
    maxTries: options.maxTries ?? 10,
    backoffMs: options.backoffMs ?? 250,
    longStepTimeoutMs: options.longStepTimeoutMs ?? 6 * 3_600_000,
    concurrentLockWaitMs: options.concurrentLockWaitMs ?? 600_000,
    logger: options.logger ?? new Logger('PgQueue'),
    runtimeFunctions: options.runtimeFunctions ?? runtimeFunctions(schema),
  };
  const state: RunState = { fresh: null, known: new Set(), poolOfOne: prismaPoolMax(prisma) === 1 };
  const applied: number[] = [];
  let tries = 0;
  let waitingSince: number | null = null;
  let waitLogged = 0;
  for (;;) {
    const at: At = { step: null };
    let outcome: Outcome;
    try {
      outcome = await prisma.$transaction((tx: SqlExecutor) => applyNextStep(prisma, tx, schema, migrations, o, state, at), {
        maxWait: 30_000,
        timeout: o.longStepTimeoutMs,
      });
    } catch (err) {
      const lockTimeout = isLockTimeout(err);
      if (lockTimeout && ++tries < o.maxTries) {
        const pause = Math.min(o.backoffMs * 2 ** (tries - 1), 5000);
        o.logger.warn(`schema install: ${at.what ?? describe(at.step)} gave up waiting for its locks (lock_timeout ${o.lockTimeoutMs} ms, try ${tries} of ${o.maxTries}): another transaction holds its table; retrying in ${pause} ms`);
        await sleep(pause);
        continue;
      }
      const failure = lockTimeout
        ? new PgQueueError(
            `pg-queue: schema install: ${at.what ?? describe(at.step)} could not get its locks in ${o.maxTries} tries (lock_timeout ${o.lockTimeoutMs} ms each): ` +
              'a long transaction holds its table (see pg_stat_activity, pg_locks). Nothing of the step was applied; start again once it ended',
          )
        : err;
      if (at.step && inTransientState(at.step.migration, at.step.index)) await undoTransient(prisma, schema, at.step, o);
      throw failure;
    }
    if (outcome.kind === 'busy') {
      waitingSince ??= Date.now();
      const waited = Date.now() - waitingSince;
      if (waited > o.longStepTimeoutMs) throw new PgQueueError(`pg-queue: schema install: another instance held the schema's install lock for more than ${o.longStepTimeoutMs} ms`);
      if (waited - waitLogged >= 60_000 || waitLogged === 0) {
        waitLogged = Math.max(waited, 1);
        o.logger.log(`schema install: another instance is upgrading schema "${schema}"; waiting for it`);
      }
      await sleep(Math.min(250 + waited / 10, 2000));
      continue;
    }
    waitingSince = null;
    waitLogged = 0;
    tries = 0;
    if (outcome.kind === 'current') return applied;
    if (outcome.kind === 'step' && outcome.finished) applied.push(outcome.version);
  }
}

async function applyNextStep(
  prisma: PrismaClientLike,
  tx: SqlExecutor,
  schema: string,
  migrations: SchemaMigration[],
  o: Resolved,
  state: RunState,
  at: At,
): Promise<Outcome> {
  const s = quoteIdent(schema);
  // Tried, not awaited: a waiting instance polls in short transactions. One blocked in a statement
  // would hold a snapshot, and a CONCURRENTLY build of the lock holder waits for every snapshot.
  const [lock] = await tx.$queryRawUnsafe<{ got: boolean }[]>('SELECT pg_try_advisory_xact_lock($1, hashtext($2)) AS got', INSTALL_LOCK_NAMESPACE, schema);
  if (!lock.got) return { kind: 'busy' };
  await tx.$executeRawUnsafe(`SELECT set_config('lock_timeout', $1, true)`, `${o.lockTimeoutMs}ms`);
  await tx.$executeRawUnsafe(`SELECT set_config('statement_timeout', $1, true)`, STEP_STATEMENT_TIMEOUT);
  // The bootstrap's ALTER TABLE takes ACCESS EXCLUSIVE on schema_version even when it changes
  // nothing: only when the table or its column is missing.
  const [boot] = await tx.$queryRawUnsafe<{ ready: boolean }[]>(
    `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'steps_done' AND NOT attisdropped) AS ready`,
    `${s}.schema_version`,
  );
  if (!boot.ready) await runScript(tx, schemaBootstrapSql(schema));
  const rows = await tx.$queryRawUnsafe<{ version: number; steps_done: number | null; applied_at: Date }[]>(`SELECT version, steps_done, applied_at FROM ${s}.schema_version`);
  state.fresh ??= rows.length === 0;
  const progress = new Map(rows.map((r) => [r.version, r.steps_done]));
  const next = migrations.find((m) => progress.get(m.version) !== null);
  if (!next) {
    at.what = 'the runtime functions';
    // On a fresh install they come with the tables: nothing to report.
    await syncRuntimeFunctions(tx, o.runtimeFunctions, (v) => progress.get(v) === null, state.fresh ? { log: () => undefined } : o.logger);
    return { kind: 'current' };
  }
  const plans = migrationStepPlans(next);
  const done = progress.get(next.version) ?? 0;
  if (progress.has(next.version) && !state.known.has(next.version)) {
    state.known.add(next.version);
    const since = rows.find((r) => r.version === next.version)?.applied_at;
    o.logger.warn(
      `schema install: migration ${next.version} (${next.name}) was left unfinished at step ${done} of ${plans.length} (last step recorded ${since?.toISOString?.() ?? '?'}); resuming it`,
    );
  }
  if (inTransientState(next, done) && next.transient?.stale) {
    const [row] = await tx.$queryRawUnsafe<Record<string, unknown>[]>(next.transient.stale);
    if (row && Object.values(row)[0] === true) {
      o.logger.warn(`schema install: migration ${next.version} (${next.name}) stopped at step ${done} in a state that must not last; undoing its steps and starting it over`);
      await runScript(tx, next.transient.undo);
      await tx.$executeRawUnsafe(`UPDATE ${s}.schema_version SET steps_done = 0, applied_at = now() WHERE version = $1`, next.version);
      return { kind: 'undone' };
    }
  }
  if (done < plans.length) {
    const plan = plans[done];
    at.step = { migration: next, index: done, of: plans.length, run: plan.run };
    if (plan.run === 'concurrently' && !state.fresh) {
      if (state.poolOfOne) {
        // The build would wait for a pool connection this transaction holds.
        o.logger.warn(`schema install: ${describe(at.step)} runs without CONCURRENTLY: the Prisma pool has one connection`);
        await runScript(tx, plan.sql);
      } else {
        o.logger.log(`schema install: ${describe(at.step)}, CONCURRENTLY`);
        await runConcurrently(prisma, schema, plan.sql, o);
      }
    } else {
      if (plan.run === 'long') {
        if (!state.fresh) o.logger.log(`schema install: ${describe(at.step)}, a scan without time limit`);
        await tx.$executeRawUnsafe(`SELECT set_config('statement_timeout', '0', true)`);
      }
      await runScript(tx, plan.sql);
    }
  } // else a later release merged steps: just record it
  const finished = done + 1 >= plans.length;
  await tx.$executeRawUnsafe(
    `INSERT INTO ${s}.schema_version (version, name, steps_done) VALUES ($1, $2, $3)
     ON CONFLICT (version) DO UPDATE SET steps_done = EXCLUDED.steps_done, applied_at = now()`,
    next.version,
    next.name,
    finished ? null : done + 1,
  );
  state.known.add(next.version);
  return { kind: 'step', version: next.version, finished };
}

/** Whether `stepsDone` committed steps leave `m` in its transient state. */
function inTransientState(m: SchemaMigration, stepsDone: number): boolean {
  return m.transient !== undefined && stepsDone >= m.transient.from && stepsDone <= m.transient.to;
}

/**
 * After a step failed in its migration's transient state: back to the state before the migration,
 * recorded as not started (steps_done 0), under the install lock and the same lock_timeout and
 * tries. If that fails too, says loudly what is left and how to undo it by hand.
 */
async function undoTransient(prisma: PrismaClientLike, schema: string, step: CurrentStep, o: Resolved): Promise<void> {
  const s = quoteIdent(schema);
  const m = step.migration;
  let lastError: unknown = null;
  for (let attempt = 1; attempt <= o.maxTries; attempt++) {
    try {
      const undone = await prisma.$transaction(
        async (tx: SqlExecutor) => {
          const [lock] = await tx.$queryRawUnsafe<{ got: boolean }[]>('SELECT pg_try_advisory_xact_lock($1, hashtext($2)) AS got', INSTALL_LOCK_NAMESPACE, schema);
          if (!lock.got) throw new PgQueueError('install lock busy');
          await tx.$executeRawUnsafe(`SELECT set_config('lock_timeout', $1, true)`, `${o.lockTimeoutMs}ms`);
          const [row] = await tx.$queryRawUnsafe<{ steps_done: number | null }[]>(`SELECT steps_done FROM ${s}.schema_version WHERE version = $1`, m.version);
          if (!row || row.steps_done !== step.index) return false; // another instance moved it on meanwhile
          await runScript(tx, m.transient!.undo);
          await tx.$executeRawUnsafe(`UPDATE ${s}.schema_version SET steps_done = 0, applied_at = now() WHERE version = $1`, m.version);
          return true;
        },
        { maxWait: 30_000, timeout: 60_000 },
      );
      if (undone) o.logger.warn(`schema install: ${describe(step)} failed; migration ${m.version}'s earlier steps were undone, the next start runs it from its first step`);
      return;
    } catch (err) {
      lastError = err;
      await sleep(Math.min(o.backoffMs * 2 ** (attempt - 1), 5000));
    }
  }
  o.logger.warn(
    `schema install: ${describe(step)} failed, and undoing migration ${m.version}'s earlier steps failed too (${(lastError as Error)?.message}). ` +
      `Its state must not last: start the installer again soon, or undo it by hand: ${m.transient!.undo.trim()} then UPDATE ${s}.schema_version SET steps_done = 0 WHERE version = ${m.version};`,
  );
}

function describe(step: CurrentStep | null): string {
  if (!step) return 'a step';
  const what = `migration ${step.migration.version} (${step.migration.name})`;
  return step.of > 1 ? `${what} step ${step.index + 1} of ${step.of}` : what;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Statement by statement: a named (prepared) statement may hold only one. */
async function runScript(tx: SqlExecutor, sql: string): Promise<void> {
  for (const statement of splitSqlScript(sql)) await tx.$executeRawUnsafe(statement);
}

/** Namespace of the installer's advisory lock; the second key is hashtext(schema). */
export const INSTALL_LOCK_NAMESPACE = 0x70_67_71; // "pgq"

/** A migration recorded as unfinished in `schema_version` (see schemaUpgradeState). */
export interface UnfinishedUpgrade {
  version: number;
  name: string;
  stepsDone: number;
  /** When its last step was recorded. */
  since: Date;
  /** Whether an installer holds the schema's install lock now (one working on it). */
  installing: boolean;
}

/**
 * Migrations left unfinished in the database (steps_done not NULL), for the health check: an
 * upgrade that another instance runs now, or one that stopped part-way (a killed process) and
 * waits for the next start. One small read of schema_version and pg_locks.
 */
export async function schemaUpgradeState(prisma: SqlExecutor, schema: string): Promise<UnfinishedUpgrade[]> {
  const rows = await prisma.$queryRawUnsafe<{ version: number; name: string; steps_done: number; applied_at: Date; installing: boolean }[]>(
    `SELECT v.version, v.name, v.steps_done, v.applied_at,
            EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                    AND l.classid = $1::int::oid AND l.objid = hashtext($2)::oid) AS installing
     FROM ${quoteIdent(schema)}.schema_version v WHERE v.steps_done IS NOT NULL ORDER BY v.version`,
    INSTALL_LOCK_NAMESPACE,
    schema,
  );
  return rows.map((r) => ({ version: r.version, name: r.name, stepsDone: r.steps_done, since: r.applied_at, installing: r.installing }));
}
