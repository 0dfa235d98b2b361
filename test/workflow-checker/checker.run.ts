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
import { createTestDatabase, type TestDatabase } from '../support/test-database';
import { CheckerFleet, describeFailure, faultPlanArb } from './harness';
import { programArb } from './programs';

const budgetMs = Number(process.env.CHECK_MINUTES ?? 1) * 60_000;
const seed = process.env.CHECK_SEED ? Number(process.env.CHECK_SEED) : Math.floor(Math.random() * 2 ** 31);
const path = process.env.CHECK_PATH || undefined;

describe('workflow checker: generated programs under generated faults', () => {
  let db: TestDatabase;
  let fleet: CheckerFleet;

  beforeAll(async () => {
    // The faulty run's instances log every statement a dropped connection failed: CHECK_VERBOSE=1 shows them.
    if (!process.env.CHECK_VERBOSE) Logger.overrideLogger(false);
    db = await createTestDatabase();
    fleet = new CheckerFleet(db);
    await fleet.start();
  }, 120_000);

  afterAll(async () => {
    await fleet?.close();
    await db?.drop();
  });

  it('ends every program as the model says, with and without faults', async () => {
    console.log(`workflow checker: seed ${seed}${path ? `, path ${path}` : ''}, budget ${budgetMs / 60_000} min (replay: npm run check:workflows -- --seed ${seed})`);
    const started = Date.now();
    try {
      await fc.assert(
        fc.asyncProperty(programArb, faultPlanArb, async (program, plan) => {
          const violations = await fleet.trial(program, plan);
          if (violations.length > 0) throw new Error(describeFailure(program, plan, violations));
        }),
        { seed, path, numRuns: path ? 1 : 1_000_000, interruptAfterTimeLimit: budgetMs, markInterruptAsFailure: false },
      );
    } finally {
      const { trials, faults, workflows } = fleet.stats;
      console.log(`workflow checker: ${trials} programs tried (${workflows} workflows), ${faults} faults injected, in ${Math.round((Date.now() - started) / 1000)} s`);
    }
  }, budgetMs + 15 * 60_000);
});
