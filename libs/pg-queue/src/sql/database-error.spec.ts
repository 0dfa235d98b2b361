import { isConnectionGone, isConnectionLost, isDatabaseUnavailable } from './database-error';

/** The shapes a server's error reaches the queue in (only what is read of them). */
const adapterError = (originalCode: string) => Object.assign(new Error('driver error'), { meta: { driverAdapterError: { cause: { kind: 'postgres', originalCode, originalMessage: 'm' } } } });
const rawQueryError = (code: string, message: string) => new Error(`\nInvalid \`prisma.$queryRawUnsafe()\` invocation:\n\n\nRaw query failed. Code: \`${code}\`. Message: \`${message}\``);
const pgError = (code: string) => Object.assign(new Error('pg error'), { code, severity: 'FATAL' });

describe('isConnectionLost', () => {
  it('a standby not promoted yet, a server shutting down or restarting, a broken connection: the database failed, not the task', () => {
    expect(isConnectionLost(adapterError('25006'))).toBe(true);
    expect(isConnectionLost(rawQueryError('25006', 'cannot execute SELECT FOR KEY SHARE in a read-only transaction'))).toBe(true);
    expect(isConnectionLost(rawQueryError('57P01', 'terminating connection due to administrator command'))).toBe(true);
    expect(isConnectionLost(pgError('57P03'))).toBe(true);
    expect(isConnectionLost(pgError('57P02'))).toBe(true);
    expect(isConnectionLost(adapterError('08006'))).toBe(true);
  });

  it("any other error is the task's (or unknown): counted as before", () => {
    expect(isConnectionLost(adapterError('23505'))).toBe(false);
    expect(isConnectionLost(rawQueryError('57014', 'canceling statement due to statement timeout'))).toBe(false);
    expect(isConnectionLost(pgError('40001'))).toBe(false);
    expect(isConnectionLost(new Error('Connection terminated unexpectedly'))).toBe(false);
    expect(isConnectionLost(Object.assign(new Error('prisma'), { code: 'P2010' }))).toBe(false);
    expect(isConnectionLost(null)).toBe(false);
  });
});

describe('isConnectionGone', () => {
  it('a connection pg marked broken, or one that closed without a SQLSTATE: gone (the checker met the first after a restart)', () => {
    expect(isConnectionGone(new Error('Client has encountered a connection error and is not queryable'))).toBe(true);
    expect(isConnectionGone(new Error('Connection terminated unexpectedly'))).toBe(true);
    expect(isConnectionGone(rawQueryError('57P01', 'terminating connection due to administrator command'))).toBe(true);
    expect(isDatabaseUnavailable(new Error('Client has encountered a connection error and is not queryable'))).toBe(true);
  });

  it('a statement timeout or a deadlock is not (a transaction function counts them as its own), though the database was unavailable', () => {
    expect(isConnectionGone(rawQueryError('57014', 'canceling statement due to statement timeout'))).toBe(false);
    expect(isConnectionGone(pgError('40P01'))).toBe(false);
    expect(isDatabaseUnavailable(pgError('40P01'))).toBe(true);
    expect(isConnectionGone(adapterError('23505'))).toBe(false);
  });
});

describe('a DriverAdapterError as @prisma/adapter-pg throws it, not wrapped by the client', () => {
  // The checker's restart fault (30-minute run, seed 26173324, path 508:12) recorded one as an
  // attempt's failure: "DriverAdapterError: terminating connection due to administrator command".
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { DriverAdapterError } = require('@prisma/driver-adapter-utils') as { DriverAdapterError: new (cause: object) => Error };
  const raw = (originalCode: string, originalMessage: string) => new DriverAdapterError({ kind: 'postgres', originalCode, originalMessage });

  it('reads its SQLSTATE: a restart is a lost connection, a unique violation is not', () => {
    expect(isConnectionLost(raw('57P01', 'terminating connection due to administrator command'))).toBe(true);
    expect(isConnectionGone(raw('57P01', 'terminating connection due to administrator command'))).toBe(true);
    expect(isDatabaseUnavailable(raw('40P01', 'deadlock detected'))).toBe(true);
    expect(isConnectionGone(raw('23505', 'duplicate key value violates unique constraint "x"'))).toBe(false);
  });
});
