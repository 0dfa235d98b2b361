import { Injectable, type OnModuleDestroy } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import { queueStatementName } from '@app/pg-queue';
import { PrismaClient } from '../generated/prisma/client';

/** The app's one PrismaClient; pg-queue runs its SQL through it too. */
@Injectable()
export class PrismaService extends PrismaClient implements OnModuleDestroy {
  constructor() {
    const url = process.env.DATABASE_URL;
    if (!url) throw new Error('DATABASE_URL is not set');
    // The queue's statements run as named prepared statements: planned once per connection. The
    // pool: this app's handlers can use 26 connections at once (the connection budget counts them
    // at startup and warns when the pool is smaller), plus a few for the HTTP requests.
    super({
      adapter: new PrismaPg(
        { connectionString: url, max: Number(process.env.DB_POOL_SIZE ?? 30) },
        { statementNameGenerator: queueStatementName },
      ),
    });
  }

  async onModuleDestroy(): Promise<void> {
    await this.$disconnect();
  }
}
