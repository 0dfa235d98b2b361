import type { SqlExecutor } from '../types';

const SAVEPOINT = 'pgqueue_task';

/**
 * Wraps the batch transaction for one task's handler:
 * - a savepoint is taken lazily, before the handler's first statement, so one task's failure is
 *   undone with ROLLBACK TO SAVEPOINT while its neighbours' work in the same transaction stays;
 *   a handler that never touches the database costs no savepoint round trips;
 * - once the handler's turn is over (finished, failed, timed out) the gate closes and any further
 *   call through `ctx.tx` throws instead of writing into a neighbour's part of the transaction.
 */
export class TransactionGate {
  /** Builds the error for calls after close; built only if such a call happens (stacks are costly). */
  private closedReason: (() => Error) | null = null;
  private savepoint: PromiseLike<unknown> | null = null;
  private proxies: WeakMap<object, unknown> | null = null;

  constructor(private readonly tx: SqlExecutor) {}

  get tookSavepoint(): boolean {
    return this.savepoint !== null;
  }

  /** The object handed to the handler as `ctx.tx`. */
  client<T>(): T {
    return this.wrap(this.tx as object) as T;
  }

  close(reason: () => Error): void {
    this.closedReason ??= reason;
  }

  /** Keeps the task's writes (or does nothing when the handler wrote nothing). */
  async release(): Promise<void> {
    if (this.savepoint) await this.tx.$executeRawUnsafe(`RELEASE SAVEPOINT ${SAVEPOINT}`);
  }

  /** Undoes the task's writes, leaving the rest of the transaction intact. */
  async rollback(): Promise<void> {
    if (!this.savepoint) return;
    await this.tx.$executeRawUnsafe(`ROLLBACK TO SAVEPOINT ${SAVEPOINT}`);
    await this.tx.$executeRawUnsafe(`RELEASE SAVEPOINT ${SAVEPOINT}`);
  }

  private assertOpen(): void {
    if (this.closedReason) throw this.closedReason();
  }

  private async call(fn: () => unknown): Promise<unknown> {
    this.assertOpen();
    this.savepoint ??= this.tx.$executeRawUnsafe(`SAVEPOINT ${SAVEPOINT}`);
    await this.savepoint;
    this.assertOpen();
    return await fn();
  }

  private wrap(target: object): unknown {
    this.proxies ??= new WeakMap();
    const cached = this.proxies.get(target);
    if (cached) return cached;
    const proxy = new Proxy(target, {
      get: (t, prop) => {
        const value: unknown = Reflect.get(t, prop, t);
        if (typeof prop !== 'string') return value;
        this.assertOpen();
        if (typeof value === 'function') {
          return (...args: unknown[]) => this.call(() => (value as (...a: unknown[]) => unknown).apply(t, args));
        }
        // Model delegates (tx.order, tx.payment, ...) are objects whose methods run queries.
        if (value !== null && typeof value === 'object' && !prop.startsWith('$') && !prop.startsWith('_')) {
          return this.wrap(value);
        }
        return value;
      },
    });
    this.proxies.set(target, proxy);
    return proxy;
  }
}
