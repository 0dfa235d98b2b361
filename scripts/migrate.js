// Applies prisma/migrations/*/migration.sql in name order, the way `prisma migrate deploy` does
// (Prisma's CLI needs a native engine that cannot be downloaded offline). Each migration runs in
// one transaction and is recorded in `_prisma_migrations` with Prisma's own columns and checksum,
// under Prisma's advisory lock, so Prisma's engine later sees the database as in sync.
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { Client } = require('pg');

const PRISMA_MIGRATE_LOCK = 72707369;
const MIGRATIONS_DIR = path.join(__dirname, '..', 'prisma', 'migrations');

const CREATE_TABLE = `
CREATE TABLE IF NOT EXISTS "_prisma_migrations" (
  "id"                  VARCHAR(36) PRIMARY KEY NOT NULL,
  "checksum"            VARCHAR(64) NOT NULL,
  "finished_at"         TIMESTAMPTZ,
  "migration_name"      VARCHAR(255) NOT NULL,
  "logs"                TEXT,
  "rolled_back_at"      TIMESTAMPTZ,
  "started_at"          TIMESTAMPTZ NOT NULL DEFAULT now(),
  "applied_steps_count" INTEGER NOT NULL DEFAULT 0
)`;

/** @returns {Promise<string[]>} names of the migrations applied by this call */
async function migrate(databaseUrl, { log = () => {} } = {}) {
  const client = new Client({ connectionString: databaseUrl });
  await client.connect();
  const applied = [];
  try {
    await client.query('SELECT pg_advisory_lock($1)', [PRISMA_MIGRATE_LOCK]);
    await client.query(CREATE_TABLE);
    const done = new Set(
      (await client.query('SELECT migration_name FROM "_prisma_migrations" WHERE finished_at IS NOT NULL AND rolled_back_at IS NULL'))
        .rows.map((r) => r.migration_name),
    );
    const names = fs.readdirSync(MIGRATIONS_DIR, { withFileTypes: true })
      .filter((d) => d.isDirectory() && fs.existsSync(path.join(MIGRATIONS_DIR, d.name, 'migration.sql')))
      .map((d) => d.name)
      .sort();
    for (const name of names) {
      if (done.has(name)) continue;
      const bytes = fs.readFileSync(path.join(MIGRATIONS_DIR, name, 'migration.sql'));
      const checksum = crypto.createHash('sha256').update(bytes).digest('hex');
      const id = crypto.randomUUID();
      await client.query('BEGIN');
      try {
        await client.query(
          'INSERT INTO "_prisma_migrations" (id, checksum, migration_name, started_at) VALUES ($1, $2, $3, now())',
          [id, checksum, name],
        );
        await client.query(bytes.toString('utf8'));
        await client.query(
          'UPDATE "_prisma_migrations" SET finished_at = now(), applied_steps_count = 1 WHERE id = $1',
          [id],
        );
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK');
        throw new Error(`migration ${name} failed: ${err.message}`);
      }
      applied.push(name);
      log(`applied migration ${name}`);
    }
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [PRISMA_MIGRATE_LOCK]).catch(() => {});
    await client.end();
  }
  return applied;
}

module.exports = { migrate };

if (require.main === module) {
  const url = process.env.DATABASE_URL;
  if (!url) {
    console.error('DATABASE_URL is not set');
    process.exit(2);
  }
  migrate(url, { log: console.log }).catch((err) => {
    console.error(err.message);
    process.exit(1);
  });
}
