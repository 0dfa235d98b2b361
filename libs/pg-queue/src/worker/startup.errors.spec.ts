import { PgQueueError } from '../errors';
import { startupConnectionError } from './startup.errors';

/** A Prisma error as the driver adapter reports a connection failure (only what is read of it). */
const prismaError = (cause: Record<string, unknown>) => Object.assign(new Error('raw driver error'), { meta: { driverAdapterError: { cause } } });

describe('startupConnectionError', () => {
  it('is the whole report: the line says what the driver said, and carries no cause to be printed again', () => {
    const err = startupConnectionError(prismaError({ kind: 'DatabaseNotReachable', host: 'db.internal', port: 6543 }), {});
    expect(err).toBeInstanceOf(PgQueueError);
    expect({ message: err!.message, hasCause: 'cause' in err! }).toEqual({
      message: 'pg-queue: cannot reach PostgreSQL at db.internal:6543 at startup; is the server running and the connection string right?',
      hasCause: false,
    });
  });

  it("names a TLS failure's reason, which was only in the driver's error", () => {
    const err = startupConnectionError(prismaError({ kind: 'TlsConnectionError', reason: 'self-signed certificate' }), {});
    expect(err?.message).toBe('pg-queue: TLS connection to PostgreSQL failed (self-signed certificate) at startup; is the server running and the connection string right?');
  });

  it('names a server state that turns connections away (SQLSTATE 57P0x), in the server\'s words', () => {
    const err = startupConnectionError(prismaError({ kind: 'postgres', code: '57P03', message: 'the database system is starting up' }), {});
    expect(err?.message).toBe('pg-queue: PostgreSQL is not accepting connections (at startup): the database system is starting up');
    expect(startupConnectionError(prismaError({ kind: 'postgres', code: '42601', message: 'syntax error' }), {})).toBeNull();
  });

  it('leaves any other error alone', () => {
    expect(startupConnectionError(prismaError({ kind: 'TableDoesNotExist', table: 'x' }), {})).toBeNull();
    expect(startupConnectionError(new Error('plain'), {})).toBeNull();
  });
});
