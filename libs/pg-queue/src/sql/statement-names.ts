import { createHash } from 'node:crypto';
import { STATEMENT_MARKER } from './fragments.sql';

const names = new Map<string, string>();

/**
 * A `statementNameGenerator` for `@prisma/adapter-pg` that turns the queue's statements into named
 * prepared statements, cached per connection. Planning the claim and completion CTEs costs about as
 * much as running them; prepared, a round trip skips that planning. Other SQL gets '' (no
 * name: prepared and planned each time, as by default).
 *
 * @example
 * ```ts
 * new PrismaClient({ adapter: new PrismaPg({ connectionString }, { statementNameGenerator: queueStatementName }) });
 * ```
 */
export function queueStatementName(query: { sql: string }): string {
  const sql = query.sql;
  if (!sql.startsWith(STATEMENT_MARKER)) return '';
  let name = names.get(sql);
  if (name === undefined) {
    name = `pgq_${createHash('sha1').update(sql).digest('hex').slice(0, 20)}`;
    names.set(sql, name);
  }
  return name;
}
