/**
 * The generated-program workflow checker (test/workflow-checker/): fast-check generates workflow
 * programs and fault plans; each trial runs a program fault-free and under its faults and holds both
 * runs against the model. `npm test` runs it for about a minute (test/e2e/workflow-checker.spec.ts);
 * `npm run check:workflows -- --minutes 30` runs it longer, and `-- --seed N --path P` replays the
 * case a failure printed. CHECK_SHAPES and CHECK_FAULTS narrow what is generated (programs.ts,
 * harness.ts).
 */
import { Logger } from '@nestjs/common';
import fc from 'fast-check';
import { startOwnCluster, type OwnCluster } from '../support/own-cluster';
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { CheckerFleet, describeFailure, faultPlanArb, type FaultPlan } from './harness';
import { programArb, type Program } from './programs';

const budgetMs = Number(process.env.CHECK_MINUTES ?? 1) * 60_000;
const seed = process.env.CHECK_SEED ? Number(process.env.CHECK_SEED) : Math.floor(Math.random() * 2 ** 31);
const path = process.env.CHECK_PATH || undefined;

describe('workflow checker: generated programs under generated faults', () => {
  let db: TestDatabase;
  let faultyDb: OwnCluster;
  let fleet: CheckerFleet;

  beforeAll(async () => {
    // The faulty run's instances log every statement a dropped connection failed: CHECK_VERBOSE=1 shows them.
    if (!process.env.CHECK_VERBOSE) Logger.overrideLogger(false);
    db = await createTestDatabase();
    faultyDb = await startOwnCluster('checker'); // restarted by the faulty run's restart faults
    fleet = new CheckerFleet(db, faultyDb);
    await fleet.start();
  }, 120_000);

  afterAll(async () => {
    await fleet?.close();
    await faultyDb?.stop();
    await db?.drop();
  }, 120_000);

  it('ends every program as the model says, with and without faults', async () => {
    console.log(`workflow checker: seed ${seed}${path ? `, path ${path}` : ''}, budget ${budgetMs / 60_000} min (replay: npm run check:workflows -- --seed ${seed})`);
    const started = Date.now();
    // fast-check stops at the budget without waiting for the trial under way: that one is awaited
    // here (nothing of it may outlive the test) and its violations reported all the same.
    interface Trial {
      program: Program;
      plan: FaultPlan;
      violations: Promise<string[]>;
      judged: boolean;
    }
    const latest: Trial[] = [];
    try {
      await fc.assert(
        fc.asyncProperty(programArb, faultPlanArb, async (program, plan) => {
          const trial: Trial = { program, plan, violations: fleet.trial(program, plan), judged: false };
          latest[0] = trial;
          const violations = await trial.violations;
          trial.judged = true;
          if (violations.length > 0) throw new Error(describeFailure(program, plan, violations));
        }),
        { seed, path, numRuns: path ? 1 : 1_000_000, interruptAfterTimeLimit: budgetMs, markInterruptAsFailure: false },
      );
      const unjudged = latest[0];
      if (unjudged && !unjudged.judged) {
        const violations = await unjudged.violations;
        if (violations.length > 0) throw new Error(`the trial under way at the budget's end failed (its seed and path are not known):\n${describeFailure(unjudged.program, unjudged.plan, violations)}`);
      }
    } finally {
      await latest[0]?.violations.catch(() => undefined);
      const { trials, faults, kills, rescued, workflows } = fleet.stats;
      console.log(
        `workflow checker: ${trials} programs tried (${workflows} workflows), ${faults} faults injected (${kills} SIGKILLs of a worker process; ` +
          `${rescued} attempts rescued from dead instances), in ${Math.round((Date.now() - started) / 1000)} s`,
      );
    }
  }, budgetMs + 15 * 60_000);
});
