/**
 * The generated-program workflow checker, part 2: one `@Workflow` method that runs any program
 * (programs.ts) through the public WorkflowContext API, the handlers of its children and follow-up
 * tasks, and what the outside world saw (every run of every step). Faults that belong inside a
 * call (a step that is slow this once) are set here by the harness. The faulty run's worker
 * process (test/fixtures/checker-worker.ts) runs the same.
 */
import { Injectable } from '@nestjs/common';
import { TaskHandler, Workflow, type LeaseTaskContext, type Task, type WorkflowContext } from '@app/pg-queue';
import { Pool } from 'pg';
import type { PrismaClient } from '../../src/generated/prisma/client';
import type { Call, Program } from './programs';

export interface ProgramInput {
  /** 'clean' or 'faulty': which run of the trial (the two run at once in separate schemas). */
  run: string;
  program: Program;
}

export const WORKFLOW_QUEUE = 'chk.program';
/** The handler's timeout: programs' steps take at most 1.2 s in all (programArb). */
export const ATTEMPT_TIMEOUT_MS = 3000;
/** Short leases, so that an attempt lost with its instance comes back within the trial. */
export const LEASE_MS = 4000;

/**
 * What the outside world saw: every run of every step, with the step key it passed on, as rows of
 * chk_outside (run, workflow, step, key), written on a pool of its own straight to the database
 * (never through the faulty run's proxy), so the worker processes a kill fault ends count with the
 * apps of this process. `slow` is this process's alone: a slow fault is met by an in-process app.
 */
export const outside = {
  pool: null as Pool | null,
  /** `${run}:${step}` → ms: the next run of that step (in any workflow of that run) takes this long. */
  slow: new Map<string, number>(),
  use(url: string): void {
    this.pool = new Pool({ connectionString: url, max: 6 });
    this.pool.on('error', () => undefined); // an idle connection dropped: the pool replaces it
  },
  /** Records a run of `step` and returns how many runs of it (this one included) the workflow has had. */
  async ran(run: string, workflow: string, step: string, key: string): Promise<number> {
    const { rows } = await this.pool!.query<{ runs: number }>(
      `WITH ins AS (INSERT INTO chk_outside (run, workflow, step, key) VALUES ($1, $2, $3, $4) RETURNING 1)
       SELECT (SELECT count(*) FROM chk_outside WHERE run = $1 AND workflow = $2 AND step = $3)::int + (SELECT count(*) FROM ins)::int AS runs`,
      [run, workflow, step, key],
    );
    return rows[0].runs;
  },
  async close(): Promise<void> {
    await this.pool?.end();
    this.pool = null;
  },
};

function wait(ms: number, signal: AbortSignal | null): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => (clearTimeout(timer), reject(signal!.reason));
    const timer = setTimeout(() => (signal?.removeEventListener('abort', onAbort), resolve()), ms);
    timer.unref(); // a step slowed past the timeout may outlive its trial, and the test file
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

async function call(input: ProgramInput, wf: WorkflowContext<PrismaClient>, c: Call): Promise<string> {
  switch (c.op) {
    case 'step': {
      const mode = c.mode;
      let runsThisCall = 0;
      const fn = async () => {
        const runs = await outside.ran(input.run, wf.workflowId, c.name, wf.stepKey(c.name));
        runsThisCall++;
        const slow = outside.slow.get(`${input.run}:${c.name}`);
        if (slow !== undefined) outside.slow.delete(`${input.run}:${c.name}`);
        await wait(slow ?? c.latencyMs, c.honoursSignal ? wf.signal : null);
        if (mode.kind === 'permanent') throw new Error(`permanent ${c.name}`);
        if (mode.kind === 'transient' && runs <= mode.fails) throw new Error(`transient ${c.name} (run ${runs})`);
        if (mode.kind === 'retried' && runsThisCall <= mode.fails) throw new Error(`retried ${c.name} (run ${runsThisCall} of this call)`);
        return `${c.name}:v`;
      };
      return wf.step(c.name, fn, mode.kind === 'retried' ? { maxAttempts: mode.fails + 1, backoff: { type: 'fixed', delayMs: 20 } } : {});
    }
    case 'transaction':
      return wf.transaction(c.name, async (tx) => {
        await tx.$executeRawUnsafe('INSERT INTO chk_ledger (run, workflow, entry) VALUES ($1, $2, $3)', input.run, wf.workflowId, c.name);
        return `${c.name}:tx`;
      });
    case 'sleep':
      await wf.sleep(c.ms);
      return 'z';
    case 'signal': {
      const got = await wf.waitForSignal<string>(c.name, c.timeoutMs === null ? {} : { timeoutMs: c.timeoutMs });
      return `${c.name}:${got}`;
    }
    case 'enqueue':
      await wf.enqueue('chk.follow', { run: input.run });
      return 'enq';
    case 'child':
      return `${c.name}:${await wf.child<number>(c.name, 'chk.child', { fails: c.fails })}`;
    case 'patched':
      return (await wf.patched(c.id)) ? call(input, wf, c.then) : 'unpatched';
  }
}

async function runProgram(input: ProgramInput, wf: WorkflowContext<PrismaClient>): Promise<string[]> {
  const out: string[] = [];
  for (const b of input.program.blocks) {
    if (b.op === 'call') out.push(await call(input, wf, b.call));
    else if (b.op === 'parallel') {
      const parts = await Promise.all(
        b.branches.map(async (branch) => {
          const got: string[] = [];
          for (const c of branch) got.push(await call(input, wf, c));
          return got;
        }),
      );
      out.push(...parts.flat());
    } else {
      try {
        for (const c of b.body) out.push(await call(input, wf, c));
      } catch (err) {
        if (b.handler === 'compensate') out.push(await wf.step(`undo-${b.tag}`, () => `undo-${b.tag}:v`));
        else if (b.handler === 'rethrow') {
          await wf.step(`log-${b.tag}`, () => undefined);
          throw err;
        } else throw new Error(`wrapped ${b.tag}: ${(err as Error).message}`);
      }
    }
  }
  return out;
}

@Injectable()
export class CheckedPrograms {
  @Workflow(WORKFLOW_QUEUE, { backoff: { type: 'fixed', delayMs: 10 }, timeoutMs: ATTEMPT_TIMEOUT_MS, leaseMs: LEASE_MS, concurrency: 20 })
  program(input: ProgramInput, wf: WorkflowContext<PrismaClient>): Promise<string[]> {
    return runProgram(input, wf);
  }

  // Attempts to spare: a shutdown whose release met a dropped connection, or a kill, counts the
  // child's attempt as a crash does; a failing child fails every one of them and ends dead.
  @TaskHandler('chk.child', { mode: 'lease', maxAttempts: 5, backoff: { type: 'fixed', delayMs: 10 }, concurrency: 10, leaseMs: 4000 })
  async child(task: Task<{ fails: boolean }>, _ctx: LeaseTaskContext): Promise<number> {
    if (task.payload.fails) throw new Error('the child fails');
    return 42;
  }

  @TaskHandler('chk.follow', { mode: 'lease', concurrency: 10 })
  async follow(_task: Task, _ctx: LeaseTaskContext): Promise<void> {}
}
