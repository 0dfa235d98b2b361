import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module';
import { dashboardToken, dashboardTokenGenerated } from './dashboard/dashboard-token.guard';

async function bootstrap(): Promise<void> {
  const app = await NestFactory.create(AppModule);
  app.enableShutdownHooks(); // SIGTERM drains the queue before Prisma disconnects
  await app.listen(Number(process.env.PORT ?? 3000), '127.0.0.1');
  // A configured secret never goes to the logs; a throwaway one is how a developer gets in.
  const token = dashboardTokenGenerated() ? dashboardToken() : '<DASHBOARD_TOKEN>';
  console.log(`queue dashboard: ${await app.getUrl()}/queues?token=${token}`);
}

void bootstrap();
