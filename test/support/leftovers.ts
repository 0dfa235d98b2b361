/**
 * What a spec opened and has not closed yet, by owner (a test database's URL; '' for the file). A
 * failing test skips its own cleanup, and one open app, pool or child process then keeps Jest from
 * exiting (the runner no longer passes --forceExit). So dropping a test database first closes what
 * is left on it, and jest.setup.ts closes whatever is left when the file ends.
 */
type Close = () => Promise<unknown>;

const open = new Map<Close, { owner: string; last: boolean }>();

/** The test database a Prisma client was made for (set by test-database.ts). */
export const ownerOf = new WeakMap<object, string>();

/**
 * Registers `close` and returns it made idempotent: once called, it is no longer a leftover.
 * `last`: close after the owner's other leftovers (the database itself).
 */
export function track(owner: string, close: Close, last = false): () => Promise<void> {
  open.set(close, { owner, last });
  return async () => {
    if (open.delete(close)) await close();
  };
}

/** Closes the leftovers of `owner` (or of every owner), never failing: this is cleanup. */
export async function closeLeftovers(owner?: string): Promise<void> {
  for (const last of [false, true]) {
    const due = [...open].filter(([, t]) => t.last === last && (owner === undefined || t.owner === owner)).map(([close]) => close);
    for (const close of due) open.delete(close);
    await Promise.all(due.map((close) => close().catch(() => undefined)));
  }
}
