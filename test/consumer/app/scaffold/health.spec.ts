// Copied next to the README's blocks in the `nest new` apps: the README's health block under the
// README's Jest configs, so @nestjs/terminus (an ES module from 12 on) loads under Jest.
import { expect, it } from '@jest/globals';
import { Test } from '@nestjs/testing';
import { AppModule } from './app.module';
import { HealthController, HealthModule } from './health.controller';

it('answers the health check', async () => {
  const app = await Test.createTestingModule({ imports: [AppModule, HealthModule] }).compile();
  await app.init();
  try {
    const res = await app.get(HealthController).check();
    expect(res.status).toBe('ok');
  } finally {
    await app.close();
  }
});
