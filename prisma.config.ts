import { defineConfig } from 'prisma/config';

// Prisma 7 reads no .env: the URL comes from the environment (the demo and tests set it).
export default defineConfig({
  schema: 'prisma/schema.prisma',
  migrations: { path: 'prisma/migrations' },
  datasource: { url: process.env.DATABASE_URL ?? 'postgresql://localhost:5432/pgqueue_demo' },
});
