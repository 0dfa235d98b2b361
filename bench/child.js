// Child process of bench/run.js: one library × scenario × repetition. The TypeScript (the bench's
// own and pg-queue's sources, imported as @app/pg-queue exactly like the example app does) is
// compiled on load by the repository's SWC require hook; no jest involved.
require('../test/support/ts-register.js');
require('./src/child-main.ts');
