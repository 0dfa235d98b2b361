import { Client } from 'pg';
import { limitStatements } from '../libs/pg-queue/src/sql/limits.sql';
import { printSchemaSql } from '../libs/pg-queue/src/sql/schema.sql';
async function main() {
  const admin = new Client({ connectionString: 'postgresql://postgres@127.0.0.1:55432/postgres' });
  await admin.connect();
  await admin.query('DROP DATABASE IF EXISTS probe'); await admin.query('CREATE DATABASE probe'); await admin.end();
  const c = new Client({ connectionString: 'postgresql://postgres@127.0.0.1:55432/probe' });
  await c.connect();
  await c.query(printSchemaSql('pgqueue'));
  await c.query(`INSERT INTO pgqueue.task (queue, payload, partition_key) SELECT 'q', '{}', 'A' FROM generate_series(1, 10000)`);
  await c.query(`INSERT INTO pgqueue.task (queue, payload, partition_key) SELECT 'q', '{}', 'B' FROM generate_series(1, 10)`);
  await c.query('ANALYZE');
  const sql = limitStatements('pgqueue').claimPartitioned.replace('/* pg-queue */', '');
  await c.query('BEGIN');
  const r = await c.query(`EXPLAIN (ANALYZE, BUFFERS) ${sql}`, ['q', 10, 'w', 60000, 5, 50, null, 40]);
  console.log(r.rows.map((x) => x['QUERY PLAN']).join('\n'));
  await c.query('ROLLBACK');
  await c.end();
}
main();
