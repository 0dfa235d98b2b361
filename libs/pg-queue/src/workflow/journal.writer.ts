import { databaseError } from '../sql/database-error';
import type { JournalRecord } from '../sql/workflow.repository';

interface Waiter {
  entry: JournalRecord;
  resolve: (recorded: boolean) => void;
  reject: (err: unknown) => void;
}

/** The most entries, and result bytes, one statement carries (one larger entry goes alone). */
export const JOURNAL_BATCH_MAX_ENTRIES = 100;
export const JOURNAL_BATCH_MAX_BYTES = 1024 * 1024;

/**
 * Journals the calls that end in the same turn of the event loop with few statements (recordMany,
 * up to JOURNAL_BATCH_MAX_ENTRIES / _BYTES each): a claim of 500 woken sleepers each finishing a
 * step records 500 entries in 5 round trips instead of 500 (the JournalLoader's counterpart for
 * writes). Each call still returns only once its own entry committed, fenced by its own lease.
 * One entry must not fail the others that share its statement: a statement of several entries
 * that the server rejects for a value (see entryMayCause) is written again in halves, down to the
 * entry that fails alone, which is the only call that rejects. Each statement is atomic, so a
 * failed one wrote nothing. Entries written inside a transaction step (`wf.transaction`,
 * `wf.enqueue`) are not batched: they commit with that transaction.
 */
export class JournalWriter {
  private waiting: Waiter[] = [];

  constructor(private readonly write: (entries: JournalRecord[]) => Promise<Set<string>>) {}

  /** True once `entry` is journaled; false when its lease was lost (or its position taken). */
  record(entry: JournalRecord): Promise<boolean> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ entry, resolve, reject });
      if (this.waiting.length === 1) setImmediate(() => void this.flush());
    });
  }

  private async flush(): Promise<void> {
    const waiting = this.waiting;
    this.waiting = [];
    await Promise.all(batches(waiting).map((batch) => this.writeBatch(batch)));
  }

  private async writeBatch(batch: Waiter[]): Promise<void> {
    try {
      const written = await this.write(batch.map((w) => w.entry));
      for (const w of batch) w.resolve(written.has(`${w.entry.lease.id}/${w.entry.seq}`));
    } catch (err) {
      if (batch.length === 1 || !entryMayCause(err)) {
        for (const w of batch) w.reject(err);
        return;
      }
      const half = Math.ceil(batch.length / 2);
      await this.writeBatch(batch.slice(0, half));
      await this.writeBatch(batch.slice(half));
    }
  }
}

/**
 * The server rejected a value of the statement: a data exception (SQLSTATE class 22: text jsonb
 * refuses, a number out of range) or a constraint (class 23). Any other failure (a lost connection,
 * a timeout, a pool with no connection) is not one entry's: writing again in halves would only
 * multiply the load, so the whole statement fails.
 */
function entryMayCause(err: unknown): boolean {
  return /^2[23]/.test(databaseError(err)?.code ?? '');
}

/** `waiting` cut into statements of at most JOURNAL_BATCH_MAX_ENTRIES entries and _BYTES of results. */
function batches(waiting: Waiter[]): Waiter[][] {
  const out: Waiter[][] = [];
  let bytes = 0;
  for (const w of waiting) {
    const size = Buffer.byteLength(w.entry.resultJson ?? '', 'utf8');
    const last = out.at(-1);
    if (last && last.length < JOURNAL_BATCH_MAX_ENTRIES && bytes + size <= JOURNAL_BATCH_MAX_BYTES) {
      last.push(w);
      bytes += size;
    } else {
      out.push([w]);
      bytes = size;
    }
  }
  return out;
}
