import type { JournalRow } from '../sql/workflow.repository';

interface Waiter {
  resolve: (rows: JournalRow[]) => void;
  reject: (err: unknown) => void;
}

/**
 * Reads the journals of the workflows whose attempts start in the same turn of the event loop with
 * one statement: the attempts of one claim start together, so a claim of 500 woken sleepers reads
 * 500 journals in one round trip instead of 500. Each attempt's read still comes after its claim
 * committed, so it sees every entry an earlier attempt journaled (see workflow.sql.ts).
 */
export class JournalLoader {
  private waiting = new Map<string, Waiter[]>();
  private scheduled = false;

  constructor(private readonly load: (taskIds: string[]) => Promise<Map<string, JournalRow[]>>) {}

  journal(taskId: string): Promise<JournalRow[]> {
    return new Promise((resolve, reject) => {
      const waiters = this.waiting.get(taskId);
      if (waiters) waiters.push({ resolve, reject });
      else this.waiting.set(taskId, [{ resolve, reject }]);
      if (this.scheduled) return;
      this.scheduled = true;
      setImmediate(() => void this.flush());
    });
  }

  private async flush(): Promise<void> {
    const batch = this.waiting;
    this.waiting = new Map();
    this.scheduled = false;
    try {
      const journals = await this.load([...batch.keys()]);
      for (const [id, waiters] of batch) for (const w of waiters) w.resolve(journals.get(id) ?? []);
    } catch (err) {
      for (const waiters of batch.values()) for (const w of waiters) w.reject(err);
    }
  }
}
