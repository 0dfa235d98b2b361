import type { JournalRecord } from '../sql/workflow.repository';

interface Waiter {
  entry: JournalRecord;
  resolve: (recorded: boolean) => void;
  reject: (err: unknown) => void;
}

/**
 * Journals the calls that end in the same turn of the event loop with one statement (recordMany):
 * a claim of 500 woken sleepers each finishing a step records 500 entries in one round trip
 * instead of 500 (the JournalLoader's counterpart for writes). Each call still returns only once
 * its own entry committed, fenced by its own lease, and a failed statement fails every call in it,
 * as its own statement would have. Entries written inside a transaction step (`wf.transaction`,
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
    const batch = this.waiting;
    this.waiting = [];
    try {
      const written = await this.write(batch.map((w) => w.entry));
      for (const w of batch) w.resolve(written.has(`${w.entry.lease.id}/${w.entry.seq}`));
    } catch (err) {
      for (const w of batch) w.reject(err);
    }
  }
}
