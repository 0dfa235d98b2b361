/** The generated-program workflow checker, on npm test's budget of about a minute (see test/workflow-checker/checker.run.ts). */
import '../workflow-checker/checker.run';
