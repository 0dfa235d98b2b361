// `npm run demo:bullmq`: three crash cases of one orders feature, against BullMQ 6 on its PostgreSQL
// backend and against pg-queue, each in real processes killed at named points; the table is read
// from the database afterwards (see bench/src/crash-cases/main.ts). DATABASE_URL: use this server
// (a database is created and dropped on it); unset: a throwaway local PostgreSQL.
require('../test/support/ts-register.js');
require('./src/crash-cases/main.ts');
