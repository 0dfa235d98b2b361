import { isLockTimeout } from './database-error';

/**
 * Writes a batch of leases with a statement bounded by rowLockBound (fragments.sql.ts). When it
 * gives up on a row lock, a business transaction holds one of the rows (see rowLockBound): the
 * statement is run again for each lease alone, so that the others are written now, and the leases
 * whose row is still held are returned for the caller to write later. Any other error is thrown.
 */
export async function byLeaseWhenHeld<L>(leases: L[], write: (part: L[]) => Promise<void>): Promise<L[]> {
  try {
    await write(leases);
    return [];
  } catch (err) {
    if (!isLockTimeout(err)) throw err;
  }
  if (leases.length === 1) return leases;
  const held: L[] = [];
  for (const lease of leases) {
    try {
      await write([lease]);
    } catch (err) {
      if (!isLockTimeout(err)) throw err;
      held.push(lease);
    }
  }
  return held;
}
