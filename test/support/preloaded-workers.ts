import { createInterface } from 'node:readline';
import { startFixtureProcess, type FixtureProcess } from './fixture-process';

/**
 * Worker processes loaded ahead of need. Loading Nest, Prisma and the library costs a fixture
 * about 1.5 s of CPU; on a 2-core machine, a replacement loaded at every kill (one a second) takes
 * most of the machine, and a throughput measured then measures the restarts, not the queue (in
 * production a replacement starts on other cores). A preloaded fixture prints "LOADED" and waits,
 * idle and without a connection, for its config on stdin (`configFromParent`); `start` hands it one.
 */
export interface PreloadedWorkers {
  /** Resolves once every spare has loaded. */
  loaded(): Promise<void>;
  /** A loaded spare given `config` (or, when none is left, a fresh process that loads first). */
  start(config: object): FixtureProcess;
  /** Spares not yet started. */
  readonly spares: number;
}

export function preloadWorkers(fixture: string, count: number): PreloadedWorkers {
  const spares = Array.from({ length: count }, () => startFixtureProcess(fixture, []));
  return {
    async loaded() {
      await Promise.all(spares.map((p) => p.line('LOADED', 120_000)));
    },
    start(config) {
      const p = spares.shift() ?? startFixtureProcess(fixture, []);
      p.child.stdin!.write(`GO ${JSON.stringify(config)}\n`);
      return p;
    },
    get spares() {
      return spares.length;
    },
  };
}

/** In a preloaded fixture, once its modules are loaded: prints "LOADED", resolves with the config its parent sends. */
export function configFromParent<T>(): Promise<T> {
  return new Promise((resolve) => {
    const lines = createInterface({ input: process.stdin });
    lines.on('line', (line) => {
      if (!line.startsWith('GO ')) return;
      lines.close();
      resolve(JSON.parse(line.slice(3)) as T);
    });
    process.stdout.write('LOADED\n');
  });
}
