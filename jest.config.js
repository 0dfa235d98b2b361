/** Jest runs TypeScript through SWC; Nest 12 ships ESM only, so @nestjs is transformed too. */
module.exports = {
  rootDir: '.',
  testEnvironment: 'node',
  testMatch: ['<rootDir>/libs/**/*.spec.ts', '<rootDir>/test/**/*.spec.ts', '<rootDir>/src/**/*.spec.ts'],
  // The consumer test's app files (a spec among them) are copied into a scaffolded app and run there.
  testPathIgnorePatterns: ['/node_modules/', '<rootDir>/test/consumer/app/'],
  transform: {
    '^.+\\.(t|j|mj)s$': ['@swc/jest', {
      jsc: {
        parser: { syntax: 'typescript', decorators: true },
        transform: { legacyDecorator: true, decoratorMetadata: true },
        target: 'es2022',
      },
      module: { type: 'commonjs' },
    }],
  },
  transformIgnorePatterns: ['/node_modules/(?!@nestjs/)'],
  moduleNameMapper: {
    '^@app/pg-queue$': '<rootDir>/libs/pg-queue/src',
    '^@app/pg-queue/(.*)$': '<rootDir>/libs/pg-queue/src/$1',
    '^(\\.{1,2}/.*)\\.js$': '$1',
  },
  testTimeout: 60000,
  // Specs mostly wait (on timers, processes, the database), so two run at once even on 2 cores;
  // more on a larger machine, at most 4, since each spec boots apps and processes of its own.
  maxWorkers: Math.min(4, Math.max(2, require('node:os').availableParallelism())),
  // Closes what a failed test left open, so that Jest exits by itself (no --forceExit).
  setupFilesAfterEnv: ['<rootDir>/test/support/jest.setup.ts'],
};
