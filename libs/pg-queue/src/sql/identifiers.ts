import { InvalidOptionsError } from '../errors';

/**
 * The schema name is the only identifier interpolated into SQL, so it is held to a strict shape:
 * a plain lower-case Postgres identifier, at most 48 characters so that the NOTIFY channel
 * `<schema>_task_ready` stays within Postgres' 63-byte identifier limit. Everything else reaches
 * SQL as a bound parameter.
 */
const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,47}$/;
const RESERVED = new Set(['public', 'pg_catalog', 'information_schema', 'pg_toast']);

export function validateSchemaName(schema: unknown): string {
  if (typeof schema !== 'string' || !SCHEMA_NAME.test(schema)) {
    throw new InvalidOptionsError('schema', `${JSON.stringify(schema)} is not a lower-case identifier matching ${SCHEMA_NAME}`);
  }
  if (RESERVED.has(schema) || schema.startsWith('pg_')) {
    throw new InvalidOptionsError('schema', `"${schema}" is reserved; pick a schema of the queue's own`);
  }
  return schema;
}

/** Quoted once, after validation; the result is safe to splice into statement text. */
export function quoteIdent(name: string): string {
  return `"${name}"`;
}

/** The LISTEN/NOTIFY channel of a schema: one channel per queue installation. */
export function notifyChannel(schema: string): string {
  return `${schema}_task_ready`;
}
